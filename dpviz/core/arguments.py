"""Argument types shared by the CLI's commands and torchrun's rank entry: parse early, fail with
a message that says how."""
from __future__ import annotations

import argparse
import re

_UNITS = {"": 1, "B": 1, "KB": 1 << 10, "KIB": 1 << 10, "MB": 1 << 20, "MIB": 1 << 20,
          "GB": 1 << 30, "GIB": 1 << 30}


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """0 allowed (e.g. a checkpoint interval of 0 means no checkpointing)."""
    return 0 if text.strip() == "0" else positive_int(text)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def size_bytes(text: str) -> int:
    """'1KB', '64MB', '4096' → bytes (binary units: 1KB = 1024 B)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected a size like 4096, 1KB or 64MB, got {text!r}")
    value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value < 1:
        raise argparse.ArgumentTypeError(f"size must be at least 1 byte, got {text!r}")
    return value


def comma_list(item_type):
    """An argparse type for 'a,b,c' lists of `item_type`."""

    def parse(text: str) -> list:
        items = [t for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected a comma-separated list")
        return [item_type(t.strip()) for t in items]

    return parse

"""Show a check: its verdict in words, and the figure of where it went wrong."""
from __future__ import annotations

import importlib

EXERCISE_FACADE = ("report", "plot_check")  # what `dpviz.lessons.exercises.<name>` offers from here


def report(check):
    """Print the verdict; when it failed on code that ran, draw yours beside the reference
    and return the Figure (None otherwise)."""
    print(check.verdict.text())
    if check.verdict.passed or getattr(check, "yours", None) is None:
        return None
    return plot_check(check)


def plot_check(check):
    """The figure of any exercise check: each subject draws its own, as `plot_<kind>` in the
    `plots` module beside its record's (the kind `ring_exercise` → `plot_ring_exercise`), so
    an exercise is one subject's files and nothing here lists them."""
    cls = type(check)
    package = cls.__module__.rpartition(".")[0]
    name = f"plot_{cls.KIND}"
    plot = getattr(importlib.import_module(f"{package}.plots"), name, None)
    if plot is None:
        raise ValueError(f"no figure for {cls.__name__}: {package}.plots has no {name}")
    return plot(check)

"""Pixels → PNG bytes for a figure redrawn on every knob move, in a fraction of PIL's time.

PIL's encoder tries a filter per row (adaptive filtering), which is most of its time on a
slider's figure; a figure of flat colours and thin lines compresses as small with no filter at all
(rows as they are). The rows are built as one array (a zero filter byte, then the pixels,
copied channel by channel, which drops the alpha) and deflated in one call: compressing row
by row (a call a row) and converting through PIL cost more. The deflate is ISA-L's (`isal`,
level 1): several times faster than zlib's level 3 for about the same bytes; any PNG decoder
inflates either (benchmarks/README.md, knob_latency.py, has the timings). Lossless:
tests/test_png.py and tests/test_legibility.py decode what a widget shows back to its pixels.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

try:   # optional (`pip install dpviz[fast]`): the same PNG, deflated several times faster
    from isal import isal_zlib as _deflater
    DEFLATE_LEVEL = 1   # ISA-L has 0-3; 1 is as fast as 0 here, a sixth fewer bytes
except ImportError:
    _deflater = zlib
    DEFLATE_LEVEL = 3   # zlib's fast levels give about the same bytes on flat-colour figures

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOR_TYPE = {"RGB": 2, "RGBA": 6}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_rgba(rgba: np.ndarray) -> bytes:
    """An (height, width, 4) uint8 RGBA array (a canvas' buffer) as an 8-bit PNG: RGB when
    every pixel is opaque (a quarter fewer bytes to compress), else RGBA; rows unfiltered."""
    if rgba.dtype != np.uint8 or rgba.ndim != 3 or rgba.shape[2] != 4:
        raise ValueError(f"expected (height, width, 4) uint8 RGBA pixels, got {rgba.dtype} {rgba.shape}")
    height, width, _ = rgba.shape
    rgba = np.ascontiguousarray(rgba)
    # opaque: every pixel's 4 bytes, read as one little-endian word, has its top byte (alpha) full
    # (one word compare a pixel: a few times faster than comparing every 4th byte)
    mode = "RGB" if bool((rgba.view("<u4") >= 0xFF000000).all()) else "RGBA"
    channels = len(mode)
    rows = np.empty((height, 1 + width * channels), dtype=np.uint8)
    rows[:, 0] = 0   # each row: filter type 0 (none), then its pixels as they are
    pixels = rows[:, 1:].reshape(height, width, channels)
    for c in range(channels):   # one 2-d copy a channel: faster than one strided 3-d copy
        pixels[..., c] = rgba[..., c]
    data = _deflater.compress(rows, DEFLATE_LEVEL)
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPE[mode], 0, 0, 0)
    return _SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", data) + _chunk(b"IEND", b"")

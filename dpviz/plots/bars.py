"""Horizontal bars as one collection, for figures a slider redraws on every move.

`Axes.broken_barh` converts units range by range in Python (~0.4 ms for a lane of a hundred
ops); `hbars` builds the same vertices with numpy and adds the same PolyCollection, so the
pixels are those of `broken_barh` (tests/test_bars.py compares them).
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
from matplotlib.collections import LineCollection, PolyCollection


def hbars(ax, xranges: Iterable[tuple[float, float]], yrange, **kwargs) -> PolyCollection:
    """`ax.broken_barh(xranges, yrange, **kwargs)` for plain float data: (start, width) ranges
    from y to y + height, one PolyCollection added with autoscaling. `yrange` is one
    (y, height) for every bar, or one per bar: the same mark on several ranks' lanes is one
    collection (each costs ~0.4 ms to make and add, however few its bars)."""
    ranges = np.asarray(list(xranges), dtype=float).reshape(-1, 2)
    x0, x1 = ranges[:, 0], ranges[:, 0] + ranges[:, 1]
    y0, height = _lanes(yrange, len(ranges))
    y1 = y0 + height
    vertices = np.empty((len(ranges), 4, 2))
    vertices[:, :, 0] = np.stack([x0, x0, x1, x1], axis=1)
    vertices[:, :, 1] = np.stack([y0, y1, y1, y0], axis=1)
    return ax.add_collection(PolyCollection(vertices, **kwargs))


def _lanes(yrange, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(bottoms, heights) of `n` bars from one (y, height) or `n` of them."""
    lanes = np.asarray(yrange, dtype=float).reshape(-1, 2)
    if len(lanes) not in (1, n):
        raise ValueError(f"give one (y, height) or one per bar ({n}), got {len(lanes)}")
    lanes = np.broadcast_to(lanes, (n, 2))
    return lanes[:, 0], lanes[:, 1]


def link_bars(ax, xranges: Iterable[tuple[float, float]], yrange, colors,
              linewidth: float = 0.8) -> list:
    """An emulated link's transfers: white bars outlined in `colors` (one per bar or one for
    all), dotted inside in the same colours: a wire being waited on, no CPU at work.
    `yrange`: one (y, height) for all, or one per bar (as `hbars`).

    Dotted lines, not a hatch: Agg renders a hatch's tile again for every bar (~0.7 ms a bar
    even at "..", several times the bar itself); dashes cost what a line costs."""
    ranges = np.asarray(list(xranges), dtype=float).reshape(-1, 2)
    bars = hbars(ax, ranges, yrange, facecolors="white", edgecolor=colors, linewidth=linewidth)
    y0, height = _lanes(yrange, len(ranges))
    x0, x1 = ranges[:, 0], ranges[:, 0] + ranges[:, 1]
    rows = [y0 + height * f for f in LINK_DOT_ROWS]
    segments = [[(a, y), (b, y)] for ys in rows for a, b, y in zip(x0, x1, ys)]
    per_row = colors if isinstance(colors, str) else list(colors) * len(rows)
    dots = ax.add_collection(LineCollection(segments, colors=per_row, linewidths=LINK_DOT_WIDTH,
                                            linestyles=LINK_DOT_STYLE, capstyle="round",
                                            zorder=bars.get_zorder()), autolim=False)   # not over later bars
    return [bars, dots]


# three rows of round dots a bar, 2 pt wide, 4 pt apart, the first 2 pt in (dashes scale with the line width)
LINK_DOT_ROWS = (1 / 4, 2 / 4, 3 / 4)
LINK_DOT_WIDTH = 2.0
LINK_DOT_STYLE = (1.0, (0.01, 2.0))

"""Horizontal bars as one collection, for figures a slider redraws on every move.

`Axes.broken_barh` converts units range by range in Python, slow on a lane of a hundred ops;
`hbars` builds the same vertices with numpy and adds the same PolyCollection, so the
pixels are those of `broken_barh` (tests/test_bars.py compares them). The collection's data
limits and colours come from numpy too (`_add_autoscaled`, `_rgba`): matplotlib measuring the
paths it was just given, and converting a list of colour names name by name, were most of
what a bar collection cost to add (benchmarks/README.md has the timings).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Iterable, Sequence

import numpy as np
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgba

from dpviz.plots import mpl_gate


def hbars(ax, xranges: Iterable[tuple[float, float]], yrange, **kwargs) -> PolyCollection:
    """`ax.broken_barh(xranges, yrange, **kwargs)` for plain float data: (start, width) ranges
    from y to y + height, one PolyCollection added with autoscaling. `yrange` is one
    (y, height) for every bar, or one per bar: the same mark on several ranks' lanes is one
    collection (each has a fixed cost to make and add, however few its bars)."""
    ranges = np.asarray(list(xranges), dtype=float).reshape(-1, 2)
    x0, x1 = ranges[:, 0], ranges[:, 0] + ranges[:, 1]
    y0, height = _lanes(yrange, len(ranges))
    y1 = y0 + height
    vertices = np.empty((len(ranges), 4, 2))
    vertices[:, :, 0] = np.stack([x0, x0, x1, x1], axis=1)
    vertices[:, :, 1] = np.stack([y0, y1, y1, y0], axis=1)
    if "alpha" not in kwargs:   # an alpha would treat "none" in a list apart from the others
        kwargs = {k: _rgba(v) if k in _COLOR_KWARGS else v for k, v in kwargs.items()}
    return _add_autoscaled(ax, PolyCollection(vertices, **kwargs), vertices)


_COLOR_KWARGS = ("facecolors", "facecolor", "edgecolors", "edgecolor", "color", "colors")


def _rgba(colors):
    """A list of colour strings as the (n, 4) array `to_rgba_array` makes of it, converting
    each distinct colour once (a step's bars repeat a few colours; matplotlib converts every
    entry). Anything else is returned as it is."""
    if not isinstance(colors, list) or not colors or not all(isinstance(c, str) for c in colors):
        return colors
    table = {c: to_rgba(c) for c in set(colors)}
    return np.array([table[c] for c in colors], dtype=float)


def _add_autoscaled(ax, collection: PolyCollection, vertices: np.ndarray) -> PolyCollection:
    """`ax.add_collection(collection)` for a collection of the polygons `vertices`, placed in
    data coordinates: matplotlib 3.11's add_collection steps (`mpl_gate.adds_in_steps`) with
    the same data limits, from the vertices in one numpy pass instead of matplotlib's
    path-by-path extents. `get_datalim` takes the vertices through the data transform and
    back (`_as_get_datalim_sees`, which follows 3.11's get_datalim, where 3.10's leaves a log
    axis's bars in log units: tests/test_frame.py), then their bounds and smallest positive
    values, non-finite ones skipped; `update_datalim` takes the same bounds of the same
    points. Where matplotlib lacks those steps, what `broken_barh` does there
    (`_add_as_broken_barh`)."""
    if not mpl_gate.adds_in_steps():
        return _add_as_broken_barh(ax, collection)
    ax.add_collection(collection, autolim=False)
    mpl_gate.count_in_relim(collection)
    mpl_gate.unstale_view(ax)
    ax.update_datalim(_as_get_datalim_sees(ax, collection, vertices.reshape(-1, 2)))
    mpl_gate.request_autoscale(ax)
    return collection


def _add_as_broken_barh(ax, collection: PolyCollection) -> PolyCollection:
    """What `broken_barh` does with its collection on any matplotlib: add it with autolim,
    then ask for autoscaling at the next draw (`mpl_gate.request_autoscale`). matplotlib
    3.10's add_collection grows only the data limits and its `broken_barh` asks for the
    autoscale after; 3.11's asks itself, and asking again changes nothing."""
    ax.add_collection(collection)
    mpl_gate.request_autoscale(ax)
    return collection


def _as_get_datalim_sees(ax, collection, points: np.ndarray) -> np.ndarray:
    """`points` transformed as `Collection.get_datalim(ax.transData)` transforms its paths'
    vertices (a collection with no offsets): into display space and back, which on a log
    axis clips what is not positive, and even on linear axes can move a value by a rounding.
    The limits then match to the bit (tests/test_bars.py)."""
    transform = collection.get_transform()
    if not transform.is_affine:
        points = transform.transform_non_affine(points)
    back = transform.get_affine() - ax.transData
    if not back.is_affine:
        points = back.transform_non_affine(points)
    return back.get_affine().transform(points)


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

    Dotted lines, not a hatch: Agg renders a hatch's tile again for every bar (even at "..",
    several times the bar itself); dashes cost what a line costs."""
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


def stacked_rows(intervals: Sequence[tuple[float, float]], groups: Sequence[Hashable] | None = None) -> list[int]:
    """Each (start, end) interval's row within its group (a thread, a rank's lane): the lowest
    row whose last interval ended by its start, so intervals of one group that overlap in time
    never share a row (a bar drawn over another's end would hide where that one ended). Taken
    in order of start, this needs no more rows than intervals are ever open at once."""
    groups = [None] * len(intervals) if groups is None else groups
    rows, ends = [0] * len(intervals), defaultdict(list)   # ends[group][row]: that row's last end
    for i in sorted(range(len(intervals)), key=lambda i: tuple(intervals[i])):
        start, end = intervals[i]
        taken = ends[groups[i]]
        rows[i] = next((row for row, last in enumerate(taken) if last <= start), len(taken))
        taken[rows[i]:rows[i] + 1] = [end]
    return rows

"""dpviz.plots.bars.hbars draws what Axes.broken_barh draws, and autoscales alike."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.backends.backend_agg import FigureCanvasAgg

from dpviz.plots import mpl_gate
from dpviz.plots.bars import hbars, stacked_rows

# hbars adds its collection by matplotlib 3.11's add_collection steps where this matplotlib has
# them (`mpl_gate.adds_in_steps`), else as broken_barh does: asking for the autoscale at the
# next draw, or autoscaling now where that private call is missing too. The tests below take
# every way (tests/test_mpl_gate.py turns each private call off on its own).
WAYS = {"3.11 steps": [], "as broken_barh": ["_set_in_autoscale"],
        "as broken_barh, autoscaled now": ["_set_in_autoscale", "_request_autoscale_view"]}


@pytest.fixture(params=list(WAYS))
def way(request):
    if not WAYS[request.param] and not mpl_gate.adds_in_steps():
        pytest.skip(f"matplotlib {matplotlib.__version__} lacks 3.11's add_collection steps")
    mpl_gate.disable(WAYS[request.param])
    yield request.param
    mpl_gate.disable([])


def _add_collection_autoscales() -> bool:
    """Whether this matplotlib's add_collection autoscales the view itself (3.11 on); before,
    broken_barh asked for the autoscale after adding its collection."""
    from matplotlib.collections import PolyCollection

    ax = Figure().add_subplot()
    ax.add_collection(PolyCollection([[(0, 0), (0, 5), (5, 5), (5, 0)]]))
    return ax.get_xlim() != (0.0, 1.0)


def _draw(add) -> tuple[np.ndarray, tuple]:
    fig = Figure(figsize=(5, 2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    add(ax)
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy(), (ax.get_xlim(), ax.get_ylim())


@pytest.mark.parametrize("kwargs", [dict(facecolors=["#4C72B0", "#DD8452", "#55A868"]),
                                    dict(facecolors="white", edgecolor="#8172B3", hatch="..", lw=0.8),
                                    dict(facecolors="none", edgecolor="#222222", linestyle=":")])
def test_hbars_draws_the_pixels_of_broken_barh(kwargs, way):
    ranges, lane = [(0.13, 2.71), (2.84, 0.0071), (5.5, 3.333)], (1.2, 0.55)
    mine, theirs = _draw(lambda ax: hbars(ax, ranges, lane, **kwargs)), \
        _draw(lambda ax: ax.broken_barh(ranges, lane, **kwargs))
    assert np.array_equal(mine[0], theirs[0]) and mine[1] == theirs[1]


def test_no_ranges_add_an_empty_collection():
    fig = Figure()
    ax = fig.add_subplot()
    assert len(hbars(ax, [], (0, 1)).get_paths()) == 0


def test_link_bars_outline_each_transfer_and_dot_it_in_its_colour():
    """An emulated transfer: a white bar outlined in its bucket's colour, dotted inside in the
    same colour (lines, clipped to the axes, leaving the data limits to the bars)."""
    from matplotlib.colors import to_rgba

    from dpviz.plots.bars import LINK_DOT_ROWS, link_bars

    fig = Figure(figsize=(5, 2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = ["#8172B3", "#64B5CD"]
    bars, dots = link_bars(ax, [(1.0, 2.0), (4.0, 0.5)], (0.25, 0.55), colors)
    assert [tuple(c) for c in bars.get_edgecolor()] == [to_rgba(c) for c in colors]
    assert {tuple(c) for c in bars.get_facecolor()} == {to_rgba("white")}
    segments = dots.get_segments()
    assert len(segments) == 2 * len(LINK_DOT_ROWS)
    for segment, color in zip(segments, [tuple(c) for c in dots.get_colors()]):
        (x0, y0), (x1, y1) = segment
        assert y0 == y1 and 0.25 < y0 < 0.8                       # inside its bar, level
        bar = 0 if x0 == 1.0 else 1
        assert (x0, x1) == ((1.0, 3.0), (4.0, 4.5))[bar] and color == to_rgba(colors[bar])
    assert dots.get_clip_on() and dots.get_clip_box().bounds == ax.bbox.bounds   # clipped to the axes
    assert tuple(ax.dataLim.intervaly) == (0.25, 0.8)
    assert dots.get_zorder() == bars.get_zorder()   # a bar drawn after them (an all-reduce) covers them
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].reshape(-1, 3)
    assert (pixels == np.array([0x81, 0x72, 0xB3])).all(axis=1).any()   # dots drawn in full colour


def test_bars_on_several_lanes_are_the_bars_drawn_lane_by_lane():
    """One collection for the same mark on every rank's lane: the pixels (and limits) of one
    `hbars`/`link_bars` per lane; a lane count that fits neither form is refused."""
    from dpviz.plots.bars import link_bars

    lanes = [((0.13, 2.71), (0.0, 0.55)), ((2.84, 1.5), (1.2, 0.55)), ((5.5, 3.333), (1.2, 0.55))]
    colors = ["#8172B3", "#64B5CD", "#CCB974"]

    def lane_by_lane(ax):
        for (xr, yr), c in zip(lanes, colors):
            link_bars(ax, [xr], yr, [c])
            hbars(ax, [xr], (yr[0] + 2, yr[1]), facecolors=[c])

    def together(ax):
        link_bars(ax, [xr for xr, _ in lanes], [yr for _, yr in lanes], colors)
        hbars(ax, [xr for xr, _ in lanes], [(yr[0] + 2, yr[1]) for _, yr in lanes], facecolors=colors)

    one, many = _draw(together), _draw(lane_by_lane)
    assert np.array_equal(one[0], many[0]) and one[1] == many[1]
    with pytest.raises(ValueError, match="one per bar"):
        hbars(Figure().add_subplot(), [(0, 1)] * 3, [(0, 1), (1, 1)])


@pytest.mark.parametrize("xscale", ["linear", "log"])
def test_hbars_sets_the_limits_add_collection_sets(xscale, way):
    """`hbars` measures its bars' data limits with numpy instead of asking matplotlib to measure
    the collection: the same data limits (bounds and smallest positive values, which a log
    axis starts from; a bar at nan is skipped), the same autoscaled view, and the bars still
    count when the limits are recomputed (`relim`) where matplotlib counts collections there
    (3.11 on). The view is broken_barh's: where add_collection leaves it (before 3.11),
    broken_barh autoscales after adding."""
    from matplotlib.collections import PolyCollection

    rng = np.random.default_rng(3)   # values whose trip through the data transform rounds
    ranges = [(0.13, 2.71), (np.nan, 1.0), (5.5, 3.333), (-2.0, 1.0)] + rng.uniform(0.01, 97, (40, 2)).tolist()
    lanes = [(1.2, 0.55), (0, 1), (0.3, 0.2), (2, 1)] + rng.uniform(0.1, 13, (40, 2)).tolist()
    colors = ["#4C72B0", "none", "#55A868", "#4C72B0"] * 11

    def matplotlib_way(ax):
        verts = [[(x, y), (x, y + h), (x + w, y + h), (x + w, y)] for (x, w), (y, h) in zip(ranges, lanes)]
        bars = ax.add_collection(PolyCollection(np.array(verts), facecolors=colors))
        if not autoscales:
            ax.autoscale_view()
        return bars

    def twice(add):   # a second collection while the first's autoscale is pending, then a margin
        def both(ax):
            bars = add(ax)
            ax.margins(x=0.1)
            add(ax)
            return bars
        return both

    autoscales = _add_collection_autoscales()
    limits = {}
    for name, add in (("hbars", lambda ax: hbars(ax, ranges, lanes, facecolors=colors)), ("theirs", matplotlib_way)):
        for how, adding in (("once", add), ("twice", twice(add))):
            fig = Figure()
            ax = fig.add_subplot()
            ax.set_xscale(xscale)
            bars = adding(ax)
            data = (ax.dataLim.get_points().tolist(), ax.dataLim.minpos.tolist())
            view = (ax.get_xlim(), ax.get_ylim())
            ax.relim()
            limits[name, how] = (data, view, ax.dataLim.get_points().tolist(), bars.get_facecolor().tolist())
    assert limits["hbars", "once"] == limits["theirs", "once"]
    assert limits["hbars", "twice"] == limits["theirs", "twice"]


def test_hbars_colour_names_become_the_rgba_matplotlib_makes():
    """A list of colour names is converted once per distinct colour: the same RGBA rows
    (including "none", fully transparent) as matplotlib's own conversion; an alpha is left
    to matplotlib."""
    from matplotlib.colors import to_rgba_array

    ax = Figure().add_subplot()
    colors = ["#4C72B0", "none", "tab:orange", "#4C72B0", "white"]
    bars = hbars(ax, [(i, 1) for i in range(5)], (0, 1), facecolors=colors, edgecolor=colors[::-1])
    assert np.array_equal(bars.get_facecolor(), to_rgba_array(colors))
    assert np.array_equal(bars.get_edgecolor(), to_rgba_array(colors[::-1]))
    faded = hbars(ax, [(i, 1) for i in range(5)], (0, 1), facecolors=colors, alpha=0.5)
    assert np.array_equal(faded.get_facecolor(), to_rgba_array(colors, 0.5))


def test_stacked_rows_give_overlapping_intervals_rows_of_their_own_and_no_more_than_needed():

    # a wire sends bucket 1 while gloo reduces bucket 0; bucket 2 starts once both have ended
    intervals = [(0, 8), (5, 13), (13, 20), (6, 7)]
    rows = stacked_rows(intervals)
    assert rows == [0, 1, 0, 2]   # (6, 7) is open beside both: a third row; touching ends share one
    assert stacked_rows(intervals, ["a", "b", "a", "b"]) == [0, 0, 0, 1]   # rows count within a group
    assert stacked_rows([]) == []

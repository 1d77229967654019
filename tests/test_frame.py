"""dpviz.widgets.frame: the boxes that decide whether a move can keep its frame."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
from matplotlib.figure import Figure

from dpviz.plots.bars import hbars, link_bars
from dpviz.widgets.frame import _collection_box


def _axes(xscale: str = "linear"):
    ax = Figure(figsize=(6, 3), dpi=100).add_subplot()
    ax.set_xscale(xscale)
    return ax


def _datalim_is_in_data_units() -> bool:
    """Whether this matplotlib's `Collection.get_datalim` gives a log axis's bars in data units:
    3.11's takes the paths through the axis's non-affine part and back; 3.10's leaves them
    in log10 units there (a bar from 2 to 50 gives 0.30 to 1.70)."""
    from matplotlib.collections import PolyCollection

    ax = _axes("log")
    bars = ax.add_collection(PolyCollection([[(2, 0), (2, 1), (50, 1), (50, 0)]]), autolim=False)
    return np.allclose(bars.get_datalim(ax.transData).intervalx, (2, 50))


@pytest.mark.parametrize("xscale", ["linear", "log"])
def test_a_collection_box_is_its_data_limits_in_pixels(xscale):
    """Bars, link dots and ticks (`vlines`) are boxed from their vertices in one pass: the box
    of their paths as drawn (each path's extent through the collection's transform), and the
    box matplotlib's `get_datalim` gives, in pixels, where that is in data units (on a log
    axis from 3.11 on) (to float rounding: both take the vertices through the data
    transform, in different orders); a scatter's offsets go to matplotlib."""
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import Bbox

    ax = _axes(xscale)
    rng = np.random.default_rng(0)
    starts, widths = rng.uniform(0.5, 80, 30), rng.uniform(0.01, 9, 30)
    lanes = [(y, 0.55) for y in rng.uniform(0, 6, 30)]
    collections = [hbars(ax, list(zip(starts, widths)), lanes, facecolors="#4C72B0"),
                   *link_bars(ax, list(zip(starts[:5], widths[:5])), (0.25, 0.55), "#8172B3"),
                   ax.vlines(starts, 1.2, 1.8, colors="#55A868", lw=2),
                   ax.scatter(starts, widths)]
    ax.figure.canvas.draw()
    data = ax.transData
    datalim_in_data = xscale == "linear" or _datalim_is_in_data_units()
    for collection in collections:
        box = _collection_box(collection).get_points()
        if not isinstance(collection, PathCollection):   # the scatter's markers are not in data units
            drawn = Bbox.union([p.get_extents(collection.get_transform()) for p in collection.get_paths()])
            assert np.allclose(box, drawn.get_points(), rtol=0, atol=1e-6)
        if datalim_in_data or isinstance(collection, PathCollection):
            theirs = collection.get_datalim(data).transformed(data)
            assert np.allclose(box, theirs.get_points(), rtol=0, atol=1e-6)


def test_a_collection_with_nothing_finite_to_box_has_a_box_that_is_not_finite():
    """`touches` draws a move whole when a changing artist's box is not finite."""
    ax = _axes()
    bars = hbars(ax, [(np.nan, 1.0)], (0, 1))
    assert not np.isfinite(_collection_box(bars).extents).all()
    assert not np.isfinite(_collection_box(hbars(ax, [], (0, 1))).extents).all()


def _framed():
    """An axes with a frame (ticks, lane names, a legend outside) and its frame's boxes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.patches import Patch

    from dpviz.widgets.frame import frame_boxes

    fig = Figure(figsize=(6, 3), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4)
    ax.set_yticks([1, 3], ["lane a", "lane b"])
    ax.legend(handles=[Patch(color="#4C72B0", label="forward")], loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return ax, frame_boxes(ax, renderer), renderer


@pytest.mark.parametrize("add, touching", [
    (lambda ax: hbars(ax, [(2, 3), (6, 1)], (1, 0.5)), False),                  # well inside
    (lambda ax: [ax.text(4, 2, "b0")], False),
    (lambda ax: hbars(ax, [(0, 3)], (1, 0.5)), True),                           # on the left spine
    (lambda ax: [ax.text(-0.3, 3, "b1", ha="right", clip_on=False)], True),     # on a lane name
    (lambda ax: [ax.text(10.5, 3.6, "b2", clip_on=False)], True),               # on the legend
    (lambda ax: hbars(ax, [(14, 3)], (1, 0.5)), False),                         # clipped away entirely
    (lambda ax: [ax.text(4, 2, "")], False),                                    # paints nothing
    (lambda ax: hbars(ax, [(np.nan, 1)], (1, 0.5)), True),                      # box not known
    (lambda ax: ax.imshow(np.zeros((2, 2)), extent=(4, 5, 1, 2)), True),       # images: always
])
def test_touches_tells_which_changing_artists_meet_the_frame(add, touching):
    from dpviz.widgets.frame import touches

    ax, frame, renderer = _framed()
    added = add(ax)
    changing = [added] if not isinstance(added, list) else added
    ax.set_xlim(0, 10)   # imshow sets its own limits
    ax.set_ylim(0, 4)
    quiet = hbars(ax, [(4, 1)], (2.5, 0.3))   # a changing artist that touches nothing, tested too
    assert touches([quiet, *changing], frame, renderer) is touching


def _toggled(ax, value: str) -> None:
    """A toggle panel's figure: bars that change with the setting, and a lane label that
    names the setting's top, as 09b's memory band does: each setting has a frame of its own."""
    top = {"reshard": 2.1, "keep": 3.4}[value]
    hbars(ax, [(0.5, top), (4, 1.5)], [(0.2, 0.6), (1.2, 0.6)], facecolors=["#4C72B0", "#DD8452"])
    ax.set_yticks([0.5, 1.5], ["rank 0", f"{top} MiB"])
    ax.set_xlim(0, 8)


def test_a_panel_toggled_between_settings_restores_each_settings_frame():
    """Moving between two settings whose frames differ, each move after the first of each
    setting restores that setting's kept frame (not only the last one's), and every move is the
    pixels of a whole draw."""
    from dpviz.widgets.slider import FigurePanel

    panel, reused = FigurePanel(_toggled, (6, 2.5)), []
    for value in ("reshard", "keep") * 3:
        panel.show(value)
        moved = panel.png()
        panel.figure.canvas.draw()
        assert panel.png() == moved
        reused.append(panel.reused_frame)
    assert reused == [False, False, True, True, True, True]

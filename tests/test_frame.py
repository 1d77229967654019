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


@pytest.mark.parametrize("xscale", ["linear", "log"])
def test_a_collection_box_is_its_data_limits_in_pixels(xscale):
    """Bars, link dots and ticks (`vlines`) are boxed from their vertices in one pass: the box
    matplotlib's `get_datalim` gives, in pixels (to float rounding: both take the vertices
    through the data transform, in different orders); a scatter's offsets go to matplotlib."""
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
    for collection in collections:
        theirs = collection.get_datalim(data).transformed(data)
        assert np.allclose(_collection_box(collection).get_points(), theirs.get_points(), rtol=0, atol=1e-6)


def test_a_collection_with_nothing_finite_to_box_has_a_box_that_is_not_finite():
    """`touches` draws a move whole when a changing artist's box is not finite."""
    ax = _axes()
    bars = hbars(ax, [(np.nan, 1.0)], (0, 1))
    assert not np.isfinite(_collection_box(bars).extents).all()
    assert not np.isfinite(_collection_box(hbars(ax, [], (0, 1))).extents).all()

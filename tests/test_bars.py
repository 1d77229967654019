"""dpviz.plots.bars.hbars draws what Axes.broken_barh draws, and autoscales alike."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.backends.backend_agg import FigureCanvasAgg

from dpviz.plots.bars import hbars


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
def test_hbars_draws_the_pixels_of_broken_barh(kwargs):
    ranges, lane = [(0.13, 2.71), (2.84, 0.0071), (5.5, 3.333)], (1.2, 0.55)
    mine, theirs = _draw(lambda ax: hbars(ax, ranges, lane, **kwargs)), \
        _draw(lambda ax: ax.broken_barh(ranges, lane, **kwargs))
    assert np.array_equal(mine[0], theirs[0]) and mine[1] == theirs[1]


def test_no_ranges_add_an_empty_collection():
    fig = Figure()
    ax = fig.add_subplot()
    assert len(hbars(ax, [], (0, 1)).get_paths()) == 0

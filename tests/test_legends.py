"""dpviz.plots.legends.kept_legend: a slider's legend put back, not rebuilt, and the same pixels."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from dpviz.plots.legends import kept_legend

KWARGS = dict(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def _handles(label: str = "backward", hatch: str | None = None) -> list:
    return [Patch(color="#4C72B0", label="forward"), Patch(color="#DD8452", label=label),
            Patch(facecolor="white", edgecolor="#9E9E9E", hatch=hatch, label="link transfer")]


def _axes():
    fig = Figure(figsize=(6, 2.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def _pixels(ax) -> np.ndarray:
    ax.figure.canvas.draw()
    return np.asarray(ax.figure.canvas.buffer_rgba()).copy()


def test_a_removed_legend_with_equal_entries_is_put_back_and_draws_the_same_pixels():
    ax, fresh = _axes(), _axes()
    first = kept_legend(ax, _handles(), **KWARGS)
    fresh.legend(handles=_handles(), **KWARGS)
    assert np.array_equal(_pixels(ax), _pixels(fresh))   # on a fresh axes: ax.legend
    first.remove()                                   # as a slider empties its axes
    assert ax.legend_ is None
    again = kept_legend(ax, _handles(), **KWARGS)    # new handle objects, equal entries
    assert again is first and ax.legend_ is first and first.axes is ax
    assert np.array_equal(_pixels(ax), _pixels(fresh))
    again.remove()
    assert ax.legend_ is None                        # removable again, as Axes.legend makes it


def test_a_legend_whose_entries_or_arguments_changed_is_made_anew():
    ax = _axes()
    legend = kept_legend(ax, _handles(), **KWARGS)
    for handles, kwargs in ((_handles(label="backward (recompute)"), KWARGS), (_handles(hatch=".."), KWARGS),
                            (_handles(), {**KWARGS, "fontsize": 9})):
        legend.remove()
        new = kept_legend(ax, handles, **kwargs)
        assert new is not legend and [t.get_text() for t in new.get_texts()] == [h.get_label() for h in handles]
        legend = new


def test_a_legend_still_shown_or_cleared_away_is_not_put_back():
    """Drawing twice on one axes without emptying it, or after `ax.clear()`, makes a new legend,
    as `ax.legend` does: only a legend removed from this axes is put back."""
    ax = _axes()
    first = kept_legend(ax, _handles(), **KWARGS)
    second = kept_legend(ax, _handles(), **KWARGS)   # the first is still shown
    assert second is not first
    ax.clear()                                        # drops the legend without removing it
    assert kept_legend(ax, _handles(), **KWARGS) is not second

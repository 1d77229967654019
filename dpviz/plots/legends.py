"""A legend made once per axes and put back while its entries hold, for figures a slider redraws.

A slider's figure (`dpviz.widgets.slider`) empties its axes and calls the plot function again
on every move; a timeline's legend (its kinds of bar) comes out the same entries move after
move, and building it again (a handle artist, a text and their boxes per entry) was a
noticeable part of a move. `kept_legend` puts the axes' previous legend back when it was made
from equal handles and arguments, and the legend is the same object drawn from the same state:
the same pixels (tests/test_legends.py). On a fresh axes it is `ax.legend`.
"""
from __future__ import annotations

from weakref import WeakKeyDictionary

from matplotlib.legend import Legend

from dpviz.plots import mpl_gate

_KEPT: WeakKeyDictionary = WeakKeyDictionary()   # axes → (key, the legend made for it)


def kept_legend(ax, handles: list, **kwargs) -> Legend:
    """`ax.legend(handles=handles, **kwargs)`, or the axes' last legend from this call put
    back when it was removed (`slider._empty`) and its handles (type, label, `look`) and
    arguments are equal, where this matplotlib lets it be removed again
    (`mpl_gate.make_removable_legend`). The key leaves out rcParams: a figure's rcParams are
    those it was first drawn with, and a kept frame's ticks keep them too."""
    key = (tuple((type(h), h.get_label(), look(h)) for h in handles), repr(sorted(kwargs.items())))
    kept = _KEPT.get(ax)
    if (kept is not None and kept[0] == key and ax.legend_ is None and kept[1].axes is None
            and mpl_gate.make_removable_legend(kept[1], ax)):
        legend = kept[1]
        legend.axes = ax                     # what Artist.remove undid, as Axes.legend sets it
        legend.set_figure(ax.figure)
        ax.legend_ = legend
        legend.stale = True
        return legend
    legend = ax.legend(handles=handles, **kwargs)
    _KEPT[ax] = (key, legend)
    return legend


def look(artist) -> tuple:
    """An artist's colours, hatch and line style: what a legend handle or patch paints with."""
    if artist is None:
        return ()
    getters = ("facecolor", "edgecolor", "color", "hatch", "linestyle", "linewidth", "fill",
               "marker", "markersize", "alpha", "visible")
    return tuple(str(getattr(artist, f"get_{g}")()) for g in getters if hasattr(artist, f"get_{g}"))

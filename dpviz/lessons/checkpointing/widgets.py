"""A k slider over a memory record: each position redraws that step's memory curve."""
from __future__ import annotations

import ipywidgets as w

from dpviz.lessons.checkpointing.plots import plot_memory_curve
from dpviz.lessons.checkpointing.records import CheckpointingRecord
from dpviz.widgets.recorded import recordable
from dpviz.widgets.slider import FigurePanel


def memory_slider(record: CheckpointingRecord, figsize: tuple[float, float] = (10, 3.6)) -> w.VBox:
    """Slide over the measured k values (0 = none); the k = 0 curve stays as a grey reference.

    No re-run: every k was measured on a live rank when the record was made.
    """
    ks = sorted(r.checkpoint_every for r in record.rows)
    figure = FigurePanel(lambda ax, k: plot_memory_curve(record, k, ax=ax), figsize)
    slider = w.SelectionSlider(options=[("none" if k == 0 else str(k), k) for k in ks],
                               value=ks[-1] if len(ks) > 1 else ks[0],
                               description="k", continuous_update=True)
    slider.observe(lambda change: figure.show(change["new"]), names="value")
    figure.show(slider.value)
    return recordable(w.VBox([slider, figure.widget]), "k slider", controls=[slider], views=[figure.widget])

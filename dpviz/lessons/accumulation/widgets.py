"""A K slider: each release re-runs DDP with K micro-steps through the `run` it is given and
redraws the schedule. No torch here: `accumulation.k_slider` binds `run` to warm ranks."""
from __future__ import annotations

from typing import Callable, Sequence

from dpviz.core.record import RunRecord
from dpviz.lessons.accumulation.plots import plot_schedule
from dpviz.lessons.buckets.records import SLIDER_GBPS
from dpviz.widgets.slider import link_panel, rerun


def k_panel(run: Callable[[int], RunRecord], ranks: int, values: Sequence[int] = tuple(range(1, 9)),
            value: int = 4, cluster=None):
    """Slide K (micro-steps per optimizer step) over `values`; `run(K)` returns a run's record
    on `ranks` ranks (the figure has one row per rank)."""
    if value not in values:
        raise ValueError(f"start value K={value} is not among the slider's values {list(values)}")
    return rerun(values, run, _draw, label="K", value=value, figsize=(11, 1.4 + 1.2 * ranks),
                 cluster=cluster)


def link_bandwidth_panel(run: Callable[[float], RunRecord], value: float, ranks: int,
                         gbps: Sequence[float] = SLIDER_GBPS, cluster=None):
    """Slider over the emulated link's bandwidth (Gb/s) at a fixed K; `run(gbps)` returns a
    run's record: only the last micro-step's all-reduces change, the K forwards and backwards do not."""
    return link_panel(run, value, _draw, gbps, figsize=(11, 1.4 + 1.2 * ranks), cluster=cluster)


def _draw(ax, record: RunRecord) -> None:
    plot_schedule(record, ax=ax)

"""An averaging-period slider: each release runs local SGD with that H through the `run` it is
given and redraws replica drift beside per-step gradient averaging. No torch here:
`averaging.period_slider` binds `run` to warm ranks (a second or two on 2 CPU ranks)."""
from __future__ import annotations

from typing import Callable, Sequence

from dpviz.lessons.averaging.plots import plot_drift
from dpviz.lessons.averaging.records import AveragingComparison, PERIODS
from dpviz.widgets.slider import rerun


def period_panel(run: Callable[[int], AveragingComparison], periods: Sequence[int] = PERIODS,
                 value: int = 8, cluster=None):
    """Slider over H (steps between parameter averages); `run(H)` returns the comparison."""
    if value not in periods:
        raise ValueError(f"value {value} is not one of the periods {list(periods)}")
    return rerun(list(periods), run, lambda ax, record: plot_drift(record, ax), label="H",
                 value=value, figsize=(9, 3.2), cluster=cluster)

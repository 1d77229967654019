"""An averaging-period slider: each release re-runs local SGD with that H on warm ranks, next
to per-step gradient averaging, and redraws replica drift (a second or two on 2 CPU ranks)."""
from __future__ import annotations

from functools import partial
from typing import Sequence

from ..averaging import compare_averaging
from ..plots.averaging import plot_drift
from .slider import rerun

PERIODS = (1, 2, 4, 8, 16, 32)


def _run_period(cluster, steps: int, first: list, period: int):
    """Both schemes on the first release; afterwards only parameter averaging with this H."""
    comparison = compare_averaging(cluster, periods=(period,), steps=steps,
                                   gradient=first[0] if first else None)
    if not first:
        first.append(comparison)
    return comparison


def period_slider(cluster, periods: Sequence[int] = PERIODS, value: int = 8, steps: int = 32):
    """Slider over H (steps between parameter averages) re-running parameter averaging live
    beside the gradient-averaging run made when the slider was built."""
    if value not in periods:
        raise ValueError(f"value {value} is not one of the periods {list(periods)}")
    return rerun(list(periods), partial(_run_period, cluster, steps, []),
                 lambda ax, record: plot_drift(record, ax), label="H", value=value, figsize=(9, 3.2),
                 cluster=cluster)

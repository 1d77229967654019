"""A K slider: each release re-runs DDP with K micro-steps through the `run` it is given and
redraws the schedule. No torch here: `accumulation.k_slider` binds `run` to warm ranks."""
from __future__ import annotations

from typing import Callable, Sequence

from ..plots.accumulation import plot_schedule
from ..record import RunRecord
from .slider import rerun


def k_panel(run: Callable[[int], RunRecord], ranks: int, values: Sequence[int] = tuple(range(1, 9)),
            value: int = 4):
    """Slide K (micro-steps per optimizer step) over `values`; `run(K)` returns a run's record
    on `ranks` ranks (the figure has one row per rank)."""
    if value not in values:
        raise ValueError(f"start value K={value} is not among the slider's values {list(values)}")
    return rerun(values, run, lambda ax, record: plot_schedule(record, ax=ax), label="K",
                 value=value, figsize=(11, 1.4 + 1.2 * ranks))

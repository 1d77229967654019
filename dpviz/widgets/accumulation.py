"""A K slider: each release re-runs DDP live with K micro-steps and redraws the schedule."""
from __future__ import annotations

from typing import Sequence

from ..accumulation import DEMO_CONFIG
from ..config import RunConfig, validate
from ..ddp_run import run
from ..launch import Cluster
from ..plots.accumulation import plot_schedule
from .slider import rerun

# A move re-runs DDP's bucket-rebuild step and the one steady step the figure draws, no more:
# a shorter wait per move (benchmarks/knob_latency.py), the same figure.
LIVE_STEPS = 2


def k_slider(cluster: Cluster, cfg: RunConfig | None = None,
             values: Sequence[int] = tuple(range(1, 9)), value: int = 4):
    """Slide K (micro-steps per optimizer step) over `values`; runs on the warm `cluster`.

    The figure is one steady step of every rank: K forward/backward blocks, and the
    all-reduces only in the last one (move `cfg.no_sync` to see the pitfalls instead).
    """
    cfg = validate(cfg or DEMO_CONFIG)
    if value not in values:
        raise ValueError(f"start value K={value} is not among the slider's values {list(values)}")
    live = cfg.replace(steps=min(cfg.steps, LIVE_STEPS))
    return rerun(values, lambda k: run(live, cluster=cluster, accum_steps=k),
                 lambda ax, record: plot_schedule(record, ax=ax), label="K", value=value,
                 figsize=(11, 1.4 + 1.2 * cfg.world_size))

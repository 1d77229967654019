"""Size the emulated link to this machine: measure the workload's backward on live ranks,
then `dpviz.link.records.sized_link` turns it into a link (Gb/s and α) in the ratio the lessons need.

The backward is measured with no communication at all: the run loop's own accumulation
(`accum_steps=2`, no link) runs the first micro-step of every step inside `ddp.no_sync()`,
so no bucket is all-reduced while it computes and gloo takes no CPU from it (on a CPU the
all-reduces share the cores: notebook 03 measures how much they slow backward). Step 0 is
left out (one-off costs, DDP's first iteration); the median over ranks and steps is kept.
"""
from __future__ import annotations

import statistics

from ..config import RunConfig, require_int
from .records import ALPHA_FRACTION, RATIO, Link, sized_link
from ..overlap import intersection, steady_steps, union
from ..record import RunRecord

FACADE = ("size_link",)   # what `dpviz.<name>` offers from here


def size_link(cfg=None, *, cluster=None, ratio: float = RATIO, alpha_fraction: float = ALPHA_FRACTION,
              steps: int = 6) -> Link:
    """The link `cfg`'s workload should run on here: its gradients cross in `ratio` × the
    measured backward, each transfer pays `alpha_fraction` × it (`dpviz.link.records.sized_link`).

    Runs `steps` optimizer steps of `cfg` (its model, size and world size; its own link and
    bucket cap do not matter: nothing is all-reduced while the measured backwards run) on the
    warm `cluster`, or on ranks started for this call. `steps` − 1 steady steps on every rank
    give the median (10 backwards with the default 6 on 2 ranks: a burst of load moves it less).
    """
    from ..ddp_run import run
    from ..launch import using_cluster
    from ..workloads.live import validate_run_config

    cfg = validate_run_config(cfg or RunConfig())
    require_int("steps", steps, 2)
    sized_link(1.0, 1, cfg.world_size, ratio, alpha_fraction)   # bad numbers fail here, before ranks
    probe = cfg.replace(steps=steps, accum_steps=2, no_sync="forward_backward", link=None,
                        checks=False, profile=True)
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        record = run(probe, cluster=ranks)
    return sized_link(silent_backward_ms(record), sum(record.param_bytes), cfg.world_size,
                      ratio, alpha_fraction)


def silent_backward_ms(record: RunRecord) -> float:
    """Median backward time of the micro-steps that all-reduced nothing (inside no_sync),
    over every rank and steady step: backward alone, with no communication beside it."""
    times = []
    for rank in range(record.world_size):
        for step in steady_steps(record):
            spans = record.spans_of(rank=rank, step=step)
            backward = union([(s.start_us, s.end_us) for s in spans if s.kind == "backward"])
            for micro in spans:
                if micro.kind == "micro_step" and not _all_reduces_in(spans, micro):
                    times.append(intersection(backward, [(micro.start_us, micro.end_us)]) / 1e3)
    if not times:
        raise ValueError("this record has no micro-step without all-reduces: record it with "
                         "accum_steps >= 2 and profile=True")
    return statistics.median(times)


def _all_reduces_in(spans, micro) -> bool:
    return any(s.kind == "allreduce" and micro.start_us <= s.start_us < micro.end_us for s in spans)

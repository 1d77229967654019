"""Size the emulated link to this machine: measure the workload's backward on live ranks,
then `dpviz.core.link.sized_link` turns it into a link (Gb/s and α) in the ratio the lessons need.

The backward is measured under the lesson's own conditions, so the link is the same run after
run: the workload's world size, model and bucket cap, every rank at once on the warm cluster,
its buckets crossing the link (on a CPU gloo's reductions then share the cores with backward,
as in the lesson's runs), the median over ranks, analysed steps and several runs. Sizing to a
backward measured alone would not hold: a lone backward is shorter than the lesson's, by how
much depends on the machine's load at that moment.
That needs a link to start from: a lone backward (inside `no_sync()`: the run loop's own
accumulation, nothing all-reduced) sizes a provisional one, and warms the ranks. The backward
depends on the link in turn (a faster link puts more of gloo's reductions beside backward, on
the same cores), so the runs are repeated on the link they sized, and the link is sized again
from those: the backward the lesson then measures is the one its link was sized to.
"""
from __future__ import annotations

import statistics

from dpviz.analysis.overlap import intersection, steady_steps, summarize, union
from dpviz.core.config import RunConfig, require_int
from dpviz.core.link import ALPHA_FRACTION, Link, RATIO, sized_link
from dpviz.core.record import RunRecord

FACADE = ("size_link",)   # what `dpviz.<name>` offers from here


def size_link(cfg=None, *, cluster=None, ratio: float = RATIO, alpha_fraction: float = ALPHA_FRACTION,
              steps: int = 4, repeats: int = 3) -> Link:
    """The link `cfg`'s workload should run on here: its gradients cross in `ratio` × the
    backward of `cfg`'s own runs on that link, each transfer pays `alpha_fraction` × it
    (`dpviz.core.link.sized_link`).

    Runs on the warm `cluster` (or ranks started for this call): one lone-backward probe that
    sizes a provisional link, then `repeats` runs of `cfg` (`steps` steps each; its model,
    world size and bucket cap; its own link does not matter) on that link, whose median
    backward over ranks and analysed steps sizes a link, then `repeats` runs on that link,
    whose backward sizes the link returned.
    """
    from dpviz.engine.ddp_run import run
    from dpviz.engine.launch import using_cluster
    from dpviz.engine.workloads import validate_run_config

    cfg = validate_run_config(cfg or RunConfig())
    require_int("steps", steps, 3, hint=": the analysed steps start after DDP's bucket rebuild in step 1")
    require_int("repeats", repeats, 1)
    sized_link(1.0, 1, cfg.world_size, ratio, alpha_fraction)   # bad numbers fail here, before ranks
    probe = cfg.replace(steps=3, accum_steps=2, no_sync="forward_backward", link=None,
                        checks=False, profile=True)
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        lone = run(probe, cluster=ranks)
        gradient_bytes = sum(lone.param_bytes)
        provisional = sized_link(silent_backward_ms(lone), gradient_bytes, cfg.world_size, ratio, alpha_fraction)
        link = provisional
        for _ in range(2):   # sized on the provisional link, then on the link that sized
            lesson = cfg.replace(steps=steps, accum_steps=1, link=link, checks=False, profile=True)
            records = [run(lesson, cluster=ranks) for _ in range(repeats)]
            link = sized_link(run_backward_ms(*records), gradient_bytes, cfg.world_size, ratio, alpha_fraction)
    return link


def run_backward_ms(*records: RunRecord) -> float:
    """Median backward time over the records' ranks and analysed steps: the backward a
    lesson's runs see (what `size_link` sizes to, and what a section checks it against)."""
    times = [row.backward_ms for record in records for row in summarize(record, steady_steps(record))]
    if not times:
        raise ValueError("no analysed steps to measure a backward in: record with profile=True and steps >= 3")
    return statistics.median(times)


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

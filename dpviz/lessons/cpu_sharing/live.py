"""The pinned-cores experiment on live ranks: the measured reason raw loopback misleads.

Same raw-loopback DDP workload, ranks pinned to cores with `os.sched_setaffinity` (every
thread of a rank, so gloo's own threads too): one rank alone on core 0, two ranks on a core
each, two ranks on core 0. Settings are taken in turn, `repeats` times, so a burst of load
lands on all of them. The record and its verdict are in `dpviz.lessons.cpu_sharing.records`.
"""
from __future__ import annotations

import os

from dpviz.lessons.buckets.records import cap_row
from dpviz.lessons.cpu_sharing.records import ALONE, CpuSharing, OWN_CORES, PinnedRow, SHARED_CORE


def pin_rank(ctx, cores_by_rank: list[list[int]] | None) -> list[int]:
    """Rank task: pin every thread of this rank to `cores_by_rank[rank]` (None: every core
    of the machine again). Threads started later inherit it. Returns the cores applied."""
    cores = set(cores_by_rank[ctx.rank]) if cores_by_rank is not None else set(range(os.cpu_count() or 1))
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except ProcessLookupError:   # a thread that ended meanwhile
            pass
    return sorted(os.sched_getaffinity(0))


def measure_cpu_sharing(cfg=None, *, cluster=None, repeats: int = 3) -> CpuSharing:
    """Run `cfg` (default: the bucket sweep's workload at 1 MiB buckets, 3 steps; raw loopback
    forced, 2 ranks) pinned three ways, in turn, `repeats` times, on the warm 2-rank `cluster`
    (which should have run once already) or fresh ranks; a 1-rank cluster is started for the
    'alone' runs and stopped after. The ranks get every core back at the end."""
    from dpviz.lessons.buckets.live import sweep_config
    from dpviz.engine.launch import using_cluster
    from dpviz.engine.workloads import validate_run_config

    if (os.cpu_count() or 1) < 2:
        raise ValueError("pinning two ranks to a core each needs at least 2 cores")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a whole number >= 1, got {repeats!r}")
    cfg = validate_run_config((cfg or sweep_config(steps=3, bucket_cap_mb=1.0)).replace(link=None, world_size=2))
    if cfg.steps < 3:
        raise ValueError(f"needs steps >= 3 (steady steps after the rebuild), got {cfg.steps}")
    with using_cluster(cluster, 2, cfg.backend, cfg.timeout_s, exact=True) as pair:
        return _measure(cfg, pair, repeats)


def _measure(cfg, cluster, repeats: int) -> CpuSharing:
    """The settings in turn on `cluster` (2 ranks) and a 1-rank cluster made here."""
    from dpviz.engine.ddp_run import run
    from dpviz.engine.launch import Cluster

    plans = {ALONE: (cfg.replace(world_size=1), [[0]]), OWN_CORES: (cfg, [[0], [1]]),
             SHARED_CORE: (cfg, [[0], [0]])}
    runs = {name: [] for name in plans}
    applied = {}
    with Cluster(1, cfg.backend, cfg.timeout_s) as alone:
        ranks = {ALONE: alone, OWN_CORES: cluster, SHARED_CORE: cluster}
        try:
            run(plans[ALONE][0].replace(steps=2), cluster=alone)   # untimed: a new cluster's first run pays one-off costs
            for _ in range(repeats):
                for name, (config, cores) in plans.items():
                    applied[name] = tuple(map(tuple, ranks[name].run_task(pin_rank, cores)))
                    runs[name].append(cap_row(run(config, cluster=ranks[name])))
        finally:
            cluster.run_task(pin_rank, None)   # the warm ranks get every core back
    rows = tuple(PinnedRow(name, plans[name][0].world_size, applied[name],
                           tuple(r.backward_ms for r in runs[name]), tuple(r.step_ms for r in runs[name]))
                 for name in plans)
    return CpuSharing(config=cfg.to_dict(), rows=rows, cpu_count=os.cpu_count() or 0)

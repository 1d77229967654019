"""Where the recording overhead comes from: the same DDP step bare, with a Python comm hook,
with dpviz's recording hook, and with that hook under the profiler, side by side.

Each variant trains the warm_vs_cold workload on the same warm ranks, interleaved repeat by
repeat so drifting machine load hits all alike; a figure is the median over ranks, steady
steps and repeats. torch's own `allreduce_hook` is Python but does only what DDP's built-in
C++ hook does, so it isolates what any Python comm hook costs.
Usage: python benchmarks/recording_overhead.py [--ranks 4] [--repeats 6]
"""
from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

from dpviz import Cluster, RunConfig

VARIANTS = ("bare DDP", "torch's Python allreduce_hook", "dpviz recording hook",
            "dpviz hook + profiler (a recorded run)")


def step_ms_rank(ctx, cfg: RunConfig, variant: str) -> list[float]:
    """Rank task: wall ms of each step after the first (the bucket rebuild) under `variant`."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, record_function

    from dpviz.engine.ddp_run import BucketLog, record_buckets, train_step
    from dpviz.engine.workloads import build_mlp

    model = build_mlp(cfg)
    ddp = DDP(model, bucket_cap_mb=cfg.bucket_cap_mb)
    log = BucketLog({}, ctx.world_size)
    if variant == VARIANTS[1]:
        ddp.register_comm_hook(None, allreduce_hook)
    elif variant in VARIANTS[2:]:
        log = record_buckets(ddp, model, ctx.world_size)
    profiled = variant == VARIANTS[3]
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
    annotate = record_function if profiled else (lambda name: nullcontext())
    times = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) if profiled else nullcontext():
        for step in range(cfg.steps):
            log.step, t0 = step, time.perf_counter()
            train_step(ctx, cfg, ddp, opt, log, step, annotate)
            times.append((time.perf_counter() - t0) * 1e3)
    return times[1:]


def main() -> None:
    import recording_overhead as me   # ranks import the task by this module's name

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    cfg = RunConfig(world_size=args.ranks, steps=12, width=512, layers=6, bucket_cap_mb=1.0)
    ms: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with Cluster(cfg.world_size) as cluster:
        for _ in range(args.repeats):
            for variant in VARIANTS:
                ms[variant] += [t for rank in cluster.run_task(me.step_ms_rank, cfg, variant) for t in rank]
    bare = statistics.median(ms[VARIANTS[0]])
    print(f"{cfg.world_size} ranks, {cfg.layers}x{cfg.width} MLP, 1 MB buckets, medians of steady steps:")
    for variant in VARIANTS:
        step = statistics.median(ms[variant])
        print(f"  {variant:40s} {step:7.2f} ms  {step / bare:5.2f} x bare")


if __name__ == "__main__":
    main()

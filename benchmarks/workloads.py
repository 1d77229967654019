"""Each built-in workload's 3-step, 2-rank DDP run, warm and cold (issue 16: "< 1 s warm").

Measured side by side in one process, medians of repeats taken in turn (a burst of load hits
every workload alike):
  warm = dpviz.run(cfg, cluster=warm): the run on 2 ranks kept alive (profiled, checked, recorded)
  cold = dpviz.run(cfg): 2 ranks started for the run, then stopped
Timings on a loaded machine are inflated: the load average is printed with the table.
Usage: python benchmarks/workloads.py [--repeats 5] [--cold 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from dpviz import Cluster, RunConfig, run
from dpviz.core.config import BUILTIN_MODELS


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cold", type=int, default=2)
    args = parser.parse_args()
    configs = {m: RunConfig(model=m, world_size=2, steps=3) for m in BUILTIN_MODELS}
    warm = {m: [] for m in configs}
    cold = {m: [] for m in configs}
    with Cluster(2) as cluster:
        for cfg in configs.values():       # each workload's first run builds its reference
            run(cfg, cluster=cluster)
        for _ in range(args.repeats):
            for m, cfg in configs.items():
                warm[m].append(timed(lambda: run(cfg, cluster=cluster)))
    for _ in range(args.cold):
        for m, cfg in configs.items():
            cold[m].append(timed(lambda: run(cfg)))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"3-step, 2-rank DDP run per workload (gloo, CPU), medians of {args.repeats} warm / "
          f"{args.cold} cold runs (load average {load})")
    print("| workload | size (layers x width, batch/rank) | warm (s) | warm min–max (s) | cold (s) | cold / warm |")
    print("|---|---|---:|---:|---:|---:|")
    for m, cfg in configs.items():
        w, c = statistics.median(warm[m]), statistics.median(cold[m])
        print(f"| {m} | {cfg.layers} x {cfg.width}, {cfg.batch_per_rank} | {w:.3f} | "
              f"{min(warm[m]):.2f}–{max(warm[m]):.2f} | {c:.2f} | {c / w:.1f}x |")


if __name__ == "__main__":
    main()

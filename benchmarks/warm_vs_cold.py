"""Warm re-run vs cold launch of the same DDP run, and the cost of recording it.

Measured side by side in one process, medians of repeats:
  cluster start = a 4-rank Cluster ready (every rank in the process group), in a fresh Python
          process each time (so the forkserver's one torch import is counted), forkserver vs spawn
  cold  = dpviz.run(cfg): spawn ranks, rendezvous, run, export+parse traces, tear down
  warm  = dpviz.run(cfg, cluster=warm): the same run on ranks kept alive
  recording overhead = median step wall time with the profiler + comm hook ÷ without (bare DDP)
Usage: python benchmarks/warm_vs_cold.py [--ranks 4] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from dpviz import Cluster, RunConfig, run


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


_START = ("import time, dpviz\n"
          "if __name__ == '__main__':\n"
          "    t0 = time.perf_counter(); c = dpviz.Cluster({n}, start_method={m!r}); c.start()\n"
          "    print(time.perf_counter() - t0); c.close()\n")


def cluster_start_s(ranks: int, method: str) -> float:
    """Seconds from Cluster(...).start() to every rank ready, in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", _START.format(n=ranks, m=method)],
                         capture_output=True, text=True, check=True, timeout=300)
    return float(out.stdout.split()[-1])


def steady_step_ms(record) -> float:
    """Median step wall time over ranks and steps after the first (bucket rebuild)."""
    return statistics.median(ms for steps in record.step_wall_ms.values() for ms in steps[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cfg = RunConfig(world_size=args.ranks, steps=3, bucket_cap_mb=1.0)
    starts = {"forkserver": [], "spawn": []}
    for _ in range(max(2, args.repeats // 2)):   # interleaved, so drifting load hits both alike
        for method in starts:
            starts[method].append(cluster_start_s(cfg.world_size, method))

    cold = [timed(lambda: run(cfg)) for _ in range(max(2, args.repeats // 2))]
    with Cluster(cfg.world_size) as warm_cluster:
        run(cfg, cluster=warm_cluster)  # first run on fresh ranks warms allocators and DDP
        warm = [timed(lambda: run(cfg, cluster=warm_cluster)) for _ in range(args.repeats)]
        long = cfg.replace(steps=12, width=512, layers=6)
        bare, instrumented = [], []
        for _ in range(args.repeats):   # interleaved, so drifting machine load hits both alike
            bare.append(steady_step_ms(run(long.replace(profile=False), cluster=warm_cluster)))
            instrumented.append(steady_step_ms(run(long, cluster=warm_cluster)))

    c, w = statistics.median(cold), statistics.median(warm)
    b, i = statistics.median(bare), statistics.median(instrumented)
    print(f"{cfg.world_size}-rank cluster start, fresh process (load average "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + "):")
    fork, spawn = statistics.median(starts["forkserver"]), statistics.median(starts["spawn"])
    print(f"  spawn (each rank imports torch)      {spawn:7.3f} s")
    print(f"  forkserver (torch imported once)     {fork:7.3f} s")
    print(f"  spawn / forkserver                   {spawn / fork:7.2f} x")
    print(f"{cfg.world_size}-rank, {cfg.steps}-step DDP run (gloo, CPU), medians of repeats:")
    print(f"  cold one-shot run    {c:7.3f} s")
    print(f"  warm re-run          {w:7.3f} s")
    print(f"  cold / warm          {c / w:7.1f} x")
    print(f"recording overhead ({long.world_size} ranks, {long.layers}x{long.width} MLP, steady steps):")
    print(f"  bare DDP step        {b:7.2f} ms")
    print(f"  recorded step        {i:7.2f} ms  (profiler with shapes + comm hook)")
    print(f"  recorded / bare      {i / b:7.2f} x")


if __name__ == "__main__":
    main()

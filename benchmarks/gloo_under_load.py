"""gloo's all-reduce alone, two at once, and beside compute on the same ranks.

The what-if model learns the cost of a bucket's all-reduce from runs where all-reduces run one
at a time; with a faster link they run beside backward and beside each other, on the cores
backward uses. Here each arm runs on the same warm ranks, after a barrier, in an order rotated
every repeat (`dpviz.lessons.collectives.timing.all_reduce_under_load_rank`, through the what-if
model's `measure_load`); each figure is the median over repeats of the slowest rank's time, the
ratios compare arms of the same run, and the rates are what the model takes from them.
Usage: python benchmarks/gloo_under_load.py [--ranks 2,4] [--sizes 1MB,6MB] [--burst 60] [--repeats 15]
"""
from __future__ import annotations

import argparse
import time

from dpviz import Cluster
from dpviz.core.arguments import comma_list, positive_int, size_bytes
from dpviz.lessons.what_if.live import measure_load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=comma_list(positive_int), default=[2, 4])
    p.add_argument("--sizes", type=comma_list(size_bytes), default=[1 << 20, 6 << 20])
    p.add_argument("--burst", type=positive_int, default=60, help="128×128 matmuls per compute burst")
    p.add_argument("--repeats", type=positive_int, default=15)
    args = p.parse_args()
    print(f"gloo on CPU, float32, median over {args.repeats} repeats of the slowest rank, ms")
    for n in args.ranks:
        with Cluster(n) as cluster:
            t0 = time.perf_counter()
            load = measure_load(cluster, sizes=args.sizes, burst=args.burst, repeats=args.repeats)
            took = time.perf_counter() - t0
        for x in load.arms:
            print(f"  {n} ranks {x.bytes / 2**20:4.1f} MiB: alone {x.alone_ms:6.2f} | two at once: the first "
                  f"{x.pair_first_ms:6.2f} (×{x.pair_first_ms / x.alone_ms:.2f} of one alone) | beside compute "
                  f"({x.compute_ms:5.2f} alone): all-reduce {x.beside_all_reduce_ms:6.2f} "
                  f"(×{x.beside_all_reduce_ms / x.alone_ms:.2f}), compute {x.beside_compute_ms:6.2f} "
                  f"(×{x.beside_compute_ms / x.compute_ms:.2f})")
        print(load.describe())
        print(f"  measured in {took:.1f} s", flush=True)


if __name__ == "__main__":
    main()

"""gloo's all-reduce alone, two at once, and beside compute on the same ranks, measured several
times back to back: how much the rates the what-if model takes move between measurements.

The what-if model learns the cost of a bucket's all-reduce from runs where all-reduces run one
at a time; with a faster link they run beside backward and beside each other, on the cores
backward uses. Here each arm runs on the same warm ranks, after a barrier, in an order rotated
every repeat (`dpviz.lessons.collectives.timing.all_reduce_under_load_rank`, through the what-if
model's `measure_load_rows`). Each measurement's rates are read two ways from the same rows:
as the model reads them (a collective from when its last rank joined, `load_from_rows`) and as
each rank's own span from the barrier, the slowest rank's (which adds the barrier's skew);
then all measurements pooled, as `check_predictions` pools its rounds.
Usage: python benchmarks/gloo_under_load.py [--ranks 2,4] [--sizes 0.5MB,1MB,6MB] [--burst 60]
       [--repeats 15] [--times 5]
"""
from __future__ import annotations

import argparse
import functools
import time

from dpviz import Cluster
from dpviz.core.arguments import comma_list, positive_int, size_bytes
from dpviz.lessons.what_if.live import LOAD_SIZES, measure_load_rows, pool_rows
from dpviz.lessons.what_if.load import GlooLoad, load_from_rows

RATES = ("reduce_beside_compute", "compute_beside_reduce", "reduce_paired")


def spread(loads: list[GlooLoad], size_index: int) -> str:
    """Each rate's lowest–highest over the measurements, at one size."""
    rates = [load.arms[size_index].rates() for load in loads]
    return "  ".join(f"{name} {min(getattr(r, name) for r in rates):.2f}–{max(getattr(r, name) for r in rates):.2f}"
                     for name in RATES)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=comma_list(positive_int), default=[2, 4])
    p.add_argument("--sizes", type=comma_list(size_bytes), default=list(LOAD_SIZES))
    p.add_argument("--burst", type=positive_int, default=60, help="128×128 matmuls per compute burst")
    p.add_argument("--repeats", type=positive_int, default=15)
    p.add_argument("--times", type=positive_int, default=5, help="measurements back to back")
    args = p.parse_args()
    print(f"gloo on CPU, float32: {args.times} measurements of {args.repeats} repeats each, medians, ms")
    for n in args.ranks:
        with Cluster(n) as cluster:
            t0 = time.perf_counter()
            rounds = [measure_load_rows(cluster, args.sizes, args.burst, args.repeats) for _ in range(args.times)]
            took = (time.perf_counter() - t0) / args.times
        joined = [load_from_rows(n, rows, args.burst) for rows in rounds]
        own = [load_from_rows(n, rows, args.burst, from_last_join=False) for rows in rounds]
        for i, size in enumerate(sorted(args.sizes)):
            print(f"  {n} ranks {size / 2**20:4.1f} MiB, the rates' range over the measurements:")
            print(f"    from the last rank's join (the model's): {spread(joined, i)}")
            print(f"    each rank's own span, the slowest:       {spread(own, i)}")
        pooled = load_from_rows(n, functools.reduce(pool_rows, rounds), args.burst)
        for x in pooled.arms:
            print(f"  pooled, {x.bytes / 2**20:4.1f} MiB: alone {x.alone_ms:6.2f} | two at once: the first "
                  f"{x.pair_first_ms:6.2f} (×{x.pair_first_ms / x.alone_ms:.2f} of one alone) | beside compute "
                  f"({x.compute_ms:5.2f} alone): all-reduce {x.beside_all_reduce_ms:6.2f} "
                  f"(×{x.beside_all_reduce_ms / x.alone_ms:.2f}), compute {x.beside_compute_ms:6.2f} "
                  f"(×{x.beside_compute_ms / x.compute_ms:.2f})")
        print(pooled.describe())
        print(f"  one measurement took {took:.1f} s", flush=True)


if __name__ == "__main__":
    main()

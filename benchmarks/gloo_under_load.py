"""gloo's all-reduce alone, two at once, and beside compute on the same ranks.

The what-if model learns the cost of a bucket's all-reduce from runs where all-reduces run one
at a time; with a faster link they run beside backward and beside each other, on the cores
backward uses. Here each arm runs on the same warm ranks, after a barrier, in an order rotated
every repeat (`dpviz.lessons.collectives.timing.all_reduce_under_load_rank`); each figure is the
median over repeats of the slowest rank's time, and the ratios compare arms of the same run.
Usage: python benchmarks/gloo_under_load.py [--ranks 2,4] [--sizes 1MB,6MB] [--burst 60] [--repeats 15]
"""
from __future__ import annotations

import argparse
import statistics

from dpviz import Cluster
from dpviz.core.arguments import comma_list, positive_int, size_bytes
from dpviz.lessons.collectives.timing import all_reduce_under_load_rank


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
            for size in args.sizes:
                ranks = cluster.run_task(all_reduce_under_load_rank, size // 4, args.burst, args.repeats)
                ms = {k: statistics.median(max(rows[i][k] for rows in ranks) for i in range(args.repeats))
                      for k in ranks[0][0]}
                print(f"  {n} ranks {size / 2**20:4.1f} MiB: alone {ms['alone']:6.2f} | two at once: both "
                      f"{ms['pair']:6.2f} (×{ms['pair'] / ms['alone']:.2f} of one alone), the first "
                      f"{ms['pair_first']:6.2f} (×{ms['pair_first'] / ms['alone']:.2f}) | beside compute "
                      f"({ms['compute']:5.2f} alone): all-reduce {ms['beside_all_reduce']:6.2f} "
                      f"(×{ms['beside_all_reduce'] / ms['alone']:.2f}), compute {ms['beside_compute']:6.2f} "
                      f"(×{ms['beside_compute'] / ms['compute']:.2f})", flush=True)


if __name__ == "__main__":
    main()

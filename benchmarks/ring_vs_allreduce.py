"""dpviz's ring (send/recv, reduce-scatter + all-gather) vs gloo's dist.all_reduce at 16 MB.

Both run on the same warm ranks in one run, interleaved size by size, warm-up calls first;
each figure is the median over repeats of the slowest rank's time. Also the contrast
algorithms, so the cost of the unchunked ring's (N−1)·S traffic shows beside the ring's
2(N−1)/N·S. Then the profile of the ring: its transfers and its adds, timed apart.
Usage: python benchmarks/ring_vs_allreduce.py [--ranks 2,4] [--size 16MB] [--repeats 7]
"""
from __future__ import annotations

import argparse
import statistics

from dpviz import Cluster
from dpviz.core.arguments import comma_list, positive_int, size_bytes
from dpviz.lessons.collectives.timing import bench_collectives, op_elements, ring_phases_rank

OPS = ("all_reduce", "ring", "ring-unchunked", "tree", "naive")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=comma_list(positive_int), default=[2, 4])
    p.add_argument("--size", type=size_bytes, default=16 << 20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=positive_int, default=7)
    args = p.parse_args()
    record = bench_collectives(args.ranks, [args.size], OPS, args.warmup, args.repeats, progress=False)
    print(f"{args.size >> 20} MB float32, gloo on CPU, median of {args.repeats} after {args.warmup} warm-up")
    for n in args.ranks:
        base = record.select("all_reduce", n)[0]
        for row in record.select(world_size=n):
            print(f"  {n} ranks  {row.op:>15}  {row.time_ms:8.2f} ms  busBW {row.busbw_gbps:6.3f} GB/s"
                  f"  ×{row.time_ms / base.time_ms:5.2f} of dist.all_reduce")
    print("where the ring's time goes (slowest rank's medians, ms):")
    for n in args.ranks:
        with Cluster(n) as cluster:
            ranks = cluster.run_task(ring_phases_rank, op_elements("ring", args.size, n),
                                     args.warmup, args.repeats)
        worst = {k: max(statistics.median(row[k] for row in rows) for rows in ranks) for k in ranks[0][0]}
        print(f"  {n} ranks  ring {worst['ring']:7.2f} = transfers {worst['transfer']:7.2f} + adds "
              f"{worst['reduce']:5.2f};  dist.all_reduce {worst['all_reduce']:7.2f}")


if __name__ == "__main__":
    main()

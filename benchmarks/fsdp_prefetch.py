"""What FSDP2's prefetching buys on the emulated link: exposed communication and step time with
prefetch on and off, side by side, and how long a knob move takes on warm ranks.

The notebook's step (`dpviz.lessons.fsdp.live.DEMO_CONFIG`: the GPT, 2 ranks, classroom link) recorded
with prefetch on and off, alternating repeat by repeat so drifting machine load hits both alike;
a figure is the median over repeats of the mean over ranks. Prints the machine's load beside it.
Usage: python benchmarks/fsdp_prefetch.py [--repeats 6] [--ranks 2] [--batch 64]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from dpviz import Cluster
from dpviz.lessons.fsdp.live import DEMO_CONFIG, record_fsdp
from dpviz.lessons.fsdp.records import summarize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--ranks", type=int, default=DEMO_CONFIG.world_size)
    parser.add_argument("--batch", type=int, default=DEMO_CONFIG.batch_per_rank)
    args = parser.parse_args()
    cfg = DEMO_CONFIG.replace(world_size=args.ranks, batch_per_rank=args.batch)
    rows: dict[bool, list] = {True: [], False: []}
    moves: list[float] = []
    with Cluster(cfg.world_size) as cluster:
        record_fsdp(cfg, cluster=cluster, checks=False)          # first FSDP set-up on the ranks
        for _ in range(args.repeats):
            for prefetch in (True, False):
                t0 = time.perf_counter()
                rows[prefetch].append(summarize(record_fsdp(cfg, cluster=cluster, prefetch=prefetch, checks=False)))
                moves.append(time.perf_counter() - t0)
    print(f"{cfg.model}, {cfg.world_size} ranks, {cfg.batch_per_rank} samples per rank, {cfg.link.label()}; "
          f"load average {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} cores")
    med = {p: {k: statistics.median(getattr(s, k) for s in rows[p]) for k in ("exposed_ms", "step_ms")}
           for p in rows}
    for p in (True, False):
        print(f"prefetch {'on ' if p else 'off'}: exposed communication {med[p]['exposed_ms']:7.1f} ms, "
              f"step {med[p]['step_ms']:7.1f} ms (median of {args.repeats})")
    print(f"prefetch off / on: exposed {med[False]['exposed_ms'] / med[True]['exposed_ms']:.2f}x, "
          f"step {med[False]['step_ms'] / med[True]['step_ms']:.2f}x")
    print(f"a knob move (record_fsdp on warm ranks, no check): median {statistics.median(moves):.2f} s")


if __name__ == "__main__":
    main()

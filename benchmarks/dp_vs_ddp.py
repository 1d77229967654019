"""DP data flow (gather to rank 0, update, send back) vs DDP all-reduce: step time and bytes sent.

Measured side by side on subgroups of one warm cluster (world sizes 2 … --ranks), same model,
same batches; bytes are each process's socket writes (/proc/self/io). Prints ratios:
  DP rank 0 bytes / DDP rank bytes   (model: (N−1) / (2(N−1)/N) = N/2)
  DP step / DDP step                 (slowest rank, median of --steps steps, repeated --repeats times)
Usage: python benchmarks/dp_vs_ddp.py [--ranks 4] [--steps 8] [--repeats 3] [--width 1024]
"""
from __future__ import annotations

import argparse
import statistics

from dpviz import Cluster, RunConfig
from dpviz.dp_vs_ddp import dp_vs_ddp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    cfg = RunConfig(layers=2, width=args.width, batch_per_rank=16)
    sizes = tuple(range(2, args.ranks + 1))
    with Cluster(args.ranks) as cluster:
        recs = [dp_vs_ddp(cluster, sizes, cfg, steps=args.steps) for _ in range(args.repeats)]
    p = recs[0].param_bytes
    print(f"MLP 2x{args.width} (P = {p / 2**20:.1f} MiB), batch 16 per rank, gloo on CPU, "
          f"medians of {args.repeats} repeats")
    print(f"{'N':>3} {'DP r0 sent/P':>13} {'DDP sent/P':>11} {'bytes ratio':>12} "
          f"{'DP ms':>8} {'DDP ms':>8} {'DP/DDP time':>12}")
    for n in sizes:
        dp_ms = statistics.median(max(x.step_ms for x in r.of("dp", n)) for r in recs)
        ddp_ms = statistics.median(max(x.step_ms for x in r.of("ddp", n)) for r in recs)
        dp0 = recs[0].of("dp", n)[0].sent_bytes
        ddp = statistics.mean(x.sent_bytes for x in recs[0].of("ddp", n))
        print(f"{n:>3} {dp0 / p:13.2f} {ddp / p:11.2f} {dp0 / ddp:12.2f} "
              f"{dp_ms:8.2f} {ddp_ms:8.2f} {dp_ms / ddp_ms:12.2f}")


if __name__ == "__main__":
    main()

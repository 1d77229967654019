"""Single-process DP vs parameter server on ranks vs DDP all-reduce: step time and bytes.

Single-process DP (nn.DataParallel's algorithm on CPU: N replicas in one process, the forwards in
N threads, outputs gathered to device 0, loss and backward there) runs in this process at
N = 1 … --ranks; the parameter server (gradients to rank 0, update, parameters back) and DDP run
on subgroups of one warm cluster (N = 2 … --ranks). Same model, same batches, batch 16 per
worker. DP's bytes are what device 0 copies out (input shards, parameters, output gradients) and
in (outputs, parameter gradients); rank bytes are each process's socket writes (/proc/self/io).
Prints per N:
  DP d0 out/P, in/P          (model: dpviz.lessons.dp_vs_ddp.records.expected_copy_bytes)
  PS r0 sent/P, DDP sent/P   (model: N−1 and 2(N−1)/N)
  step ms of DP / PS / DDP   (slowest rank; medians of --steps steps, median over --repeats)
Usage: python benchmarks/dp_vs_ddp.py [--ranks 4] [--steps 8] [--repeats 3] [--width 1024]
"""
from __future__ import annotations

import argparse
import statistics

from dpviz import Cluster, RunConfig
from dpviz.lessons.dp_vs_ddp.live import dp_vs_ddp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    cfg = RunConfig(layers=2, width=args.width, batch_per_rank=16)
    sizes = tuple(range(2, args.ranks + 1))
    replicas = tuple(range(1, args.ranks + 1))
    with Cluster(args.ranks) as cluster:
        recs = [dp_vs_ddp(cfg, cluster=cluster, world_sizes=sizes, steps=args.steps, replicas=replicas)
                for _ in range(args.repeats)]
    p = recs[0].param_bytes
    print(f"MLP 2x{args.width} (P = {p / 2**20:.1f} MiB), batch 16 per worker, gloo on CPU, "
          f"medians of {args.repeats} repeats")
    print(f"{'N':>3} {'DP out/P':>9} {'DP in/P':>8} {'PS r0/P':>8} {'DDP/P':>6} "
          f"{'DP ms':>7} {'PS ms':>7} {'DDP ms':>7} {'threads':>8} {'max|dDP-DDP|':>13}")
    for n in replicas:
        d = recs[0].dp(n)
        dp_ms = statistics.median(r.dp(n).step_ms for r in recs)
        row = f"{n:>3} {d.bytes_out / p:9.2f} {d.bytes_in / p:8.2f} "
        if n in sizes:
            ps_ms = statistics.median(max(x.step_ms for x in r.of("ps", n)) for r in recs)
            ddp_ms = statistics.median(max(x.step_ms for x in r.of("ddp", n)) for r in recs)
            ps0 = recs[0].of("ps", n)[0].sent_bytes
            ddp = statistics.mean(x.sent_bytes for x in recs[0].of("ddp", n))
            diff = max(r.dp(n).max_diff_vs_ddp for r in recs)
            row += (f"{ps0 / p:8.2f} {ddp / p:6.2f} {dp_ms:7.2f} {ps_ms:7.2f} {ddp_ms:7.2f} "
                    f"{d.threads:>8} {diff:13.1e}")
        else:
            row += f"{'-':>8} {'-':>6} {dp_ms:7.2f} {'-':>7} {'-':>7} {d.threads:>8} {'-':>13}"
        print(row)


if __name__ == "__main__":
    main()

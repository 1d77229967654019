"""`dpviz bench allreduce`: time collectives per size on live ranks → DIR/bench.json."""
from __future__ import annotations

import argparse

from dpviz.app.link_args import add_link_arguments, link_of
from dpviz.core.arguments import comma_list, positive_int, size_bytes
from dpviz.lessons.collectives.bandwidth import OPS, fit_all
from dpviz.lessons.collectives.timing import bench_collectives

NAME = "bench"
HELP = "time dist.all_reduce and dpviz's ring per message size; algBW, busBW, alpha-beta fit"


def size_list(text: str) -> list[int]:
    """'1KB,4KB' or '1KB,...,64MB' (every power of two from 1 KB to 64 MB)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if "..." not in items:
        return comma_list(size_bytes)(text)
    if len(items) != 3 or items[1] != "...":
        raise argparse.ArgumentTypeError(f"write a range as FIRST,...,LAST (e.g. 1KB,...,64MB), got {text!r}")
    first, last = size_bytes(items[0]), size_bytes(items[2])
    if last < first:
        raise argparse.ArgumentTypeError(f"range {text!r} ends below its start")
    sizes = [first]
    while sizes[-1] * 2 <= last:
        sizes.append(sizes[-1] * 2)
    return sizes


def op_list(text: str) -> list[str]:
    ops = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise argparse.ArgumentTypeError(f"unknown op(s) {unknown or text!r}; choose from {', '.join(OPS)}")
    return ops


def add_arguments(p) -> None:
    p.add_argument("what", choices=["allreduce"], help="what to benchmark")
    p.add_argument("--ranks", type=comma_list(positive_int), default=[2, 4], help="rank counts, e.g. 2,4")
    p.add_argument("--sizes", type=size_list, default=size_list("1KB,...,64MB"),
                   help="message sizes: 1KB,64KB,1MB or a doubling range 1KB,...,64MB (default)")
    p.add_argument("--ops", type=op_list, default=["all_reduce", "ring"],
                   help=f"comma-separated, from {', '.join(OPS)} (default all_reduce,ring)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per point (default %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed calls per point; the median is kept")
    p.add_argument("--out", required=True, help="folder for bench.json")
    add_link_arguments(p)   # with a link, --ops must be all_reduce


def main(args) -> int:
    record = bench_collectives(args.ranks, args.sizes, args.ops, args.warmup, args.repeats, out=args.out,
                               link=link_of(args))
    print(f"{'op':>15} {'ranks':>5} {'bytes':>10} {'time_ms':>9} {'algbw':>7} {'busbw':>7}  (GB/s)")
    for r in record.rows:
        print(f"{r.op:>15} {r.world_size:>5} {r.bytes:>10} {r.time_ms:>9.3f} {r.algbw_gbps:>7.3f} {r.busbw_gbps:>7.3f}")
    for fit in fit_all(record):
        print(f"alpha-beta {fit.op}, {fit.world_size} ranks: α = {fit.alpha_ms:.3f} ms, "
              f"1/β = {fit.bandwidth_gbps:.3f} GB/s, knee α/β = {fit.knee_bytes / 1024:.0f} KB")
    print(f"wrote {args.out}/bench.json")
    return 0

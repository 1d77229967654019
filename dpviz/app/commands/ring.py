"""`dpviz ring`: run an all-reduce algorithm step by step on live ranks → DIR/ring.json."""
from __future__ import annotations

from dpviz.core.arguments import positive_int
from dpviz.lessons.collectives.algorithms import ALGORITHMS
from dpviz.lessons.collectives.execute import record_collective
from dpviz.lessons.collectives.record import describe_collective

NAME = "ring"
HELP = "run ring (or tree, naive, ring-unchunked) all-reduce with send/recv on live ranks and record every step"


def add_arguments(p) -> None:
    p.add_argument("--ranks", type=positive_int, default=4, help="number of ranks, at least 2 (default %(default)s)")
    p.add_argument("--elements", type=positive_int, default=16, help="float32 elements per rank (default %(default)s)")
    p.add_argument("--algorithm", choices=list(ALGORITHMS), default="ring", help="default %(default)s")
    p.add_argument("--seed", type=int, default=0, help="seed of the integer inputs (default %(default)s)")
    p.add_argument("--out", required=True, help="folder for ring.json")


def main(args) -> int:
    record = record_collective(args.algorithm, elements=args.elements, world_size=args.ranks, seed=args.seed,
                               out=args.out)
    print(describe_collective(record))
    print(f"wrote {args.out}/ring.json")
    return 0 if record.matches_all_reduce else 1

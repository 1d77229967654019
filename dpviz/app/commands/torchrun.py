"""`dpviz torchrun`: dpviz's DDP workload under torchrun on this machine, listening on loopback only."""
from __future__ import annotations

import argparse

from dpviz.core.arguments import positive_int
from dpviz.engine.torchrun_entry import launch_on_loopback, parse_args

NAME = "torchrun"
HELP = ("run dpviz's DDP workload under torchrun on this machine, every listening socket on "
        "127.0.0.1 (arguments after -- go to python -m dpviz.engine.torchrun_entry)")


def add_arguments(p) -> None:
    p.add_argument("--nproc-per-node", type=positive_int, default=2, help="ranks to start (default %(default)s)")
    p.add_argument("entry_args", nargs=argparse.REMAINDER,
                   help="-- then the arguments of python -m dpviz.engine.torchrun_entry, e.g. -- --backend gloo --out DIR")


def main(args) -> int:
    entry_args = args.entry_args[1:] if args.entry_args[:1] == ["--"] else args.entry_args
    parse_args(entry_args)   # bad arguments fail here, before torchrun starts anything
    return launch_on_loopback(args.nproc_per_node, entry_args)

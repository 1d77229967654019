"""`dpviz` / `python -m dpviz`: one subcommand per command module.

A subject's commands live in its package (`dpviz/<subject>/cli.py`, a second one in
`cli_<name>.py`); commands that span subjects (run, animate, book, tour, torchrun) in
`dpviz.commands`. Each defines NAME, HELP, `add_arguments(parser)` and `main(args) -> int`.
Bad input prints one line, `dpviz: error: …`, and exits 2; a failing rank exits 1.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from .launch import RankError

PACKAGE = Path(__file__).resolve().parent


def _command_modules():
    shared = (f"commands.{p.stem}" for p in (PACKAGE / "commands").glob("*.py") if not p.stem.startswith("_"))
    subjects = (f"{p.parent.name}.{p.stem}" for p in PACKAGE.glob("*/cli*.py"))
    for name in sorted({*shared, *subjects}):
        yield importlib.import_module(f"{__package__}.{name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpviz", description="Run, record and draw data-parallel training on live ranks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in sorted(_command_modules(), key=lambda m: m.NAME):
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(handler=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args) or 0
    except RankError as err:
        print(f"dpviz: {err}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError) as err:  # bad input: one clear line, no traceback
        parser.exit(2, f"dpviz {args.command}: error: {err}\n")
    except KeyboardInterrupt:
        print("dpviz: interrupted; ranks stopped", file=sys.stderr)
        return 130

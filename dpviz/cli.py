"""`dpviz` / `python -m dpviz`: one subcommand per module in `dpviz.commands` and per
`dpviz/<subject>/cli*.py`.

Each command module defines NAME, HELP, `add_arguments(parser)` and `main(args) -> int`.
Bad input prints one line, `dpviz: error: …`, and exits 2; a failing rank exits 1.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

from . import commands
from .launch import RankError


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{commands.__name__}.{info.name}")
    for path in sorted(Path(__file__).parent.glob("*/cli*.py")):
        yield importlib.import_module(f"{__package__}.{path.parent.name}.{path.stem}")


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

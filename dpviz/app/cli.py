"""`dpviz` / `python -m dpviz`: one subcommand per command module.

Every command is one module of `dpviz.app.commands`, a subject's as well as those that span
subjects. Each defines NAME, HELP, `add_arguments(parser)` and `main(args) -> int`.
Names and helps are read from the source (`discover.command_modules`), and only the chosen
command's module is imported: a command pays for its own imports, not for every other's.
Bad input prints one line, `dpviz: error: …`, and exits 2; a failing rank exits 1.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from dpviz.core.discover import command_modules


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """Every command listed; the arguments of the one `argv` names (its module imported)."""
    parser = argparse.ArgumentParser(
        prog="dpviz", description="Run, record and draw data-parallel training on live ranks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _chosen(sys.argv[1:] if argv is None else argv)
    for name, (module_name, help_) in sorted(command_modules().items()):
        cmd = sub.add_parser(name, help=help_, description=help_)
        if name == chosen:
            module = importlib.import_module(f"dpviz.{module_name}")
            module.add_arguments(cmd)
            cmd.set_defaults(handler=module.main)
    return parser


def _chosen(argv: list[str]) -> str | None:
    """The command's name: the first argument that is not an option (the top level has no
    option taking a value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return args.handler(args) or 0
    except (ValueError, FileNotFoundError) as err:  # bad input: one clear line, no traceback
        parser.exit(2, f"dpviz {args.command}: error: {err}\n")
    except KeyboardInterrupt:
        print("dpviz: interrupted; ranks stopped", file=sys.stderr)
        return 130
    except RuntimeError as err:
        if not _rank_failed(err):
            raise
        print(f"dpviz: {err}", file=sys.stderr)
        return 1


def _rank_failed(err: BaseException) -> bool:
    """A rank raised, died or hung: only commands that launch ranks import the launcher."""
    launch = sys.modules.get("dpviz.engine.launch")
    return launch is not None and isinstance(err, launch.RankError)

"""Every result a figure draws is a registered record kind, and every kind survives JSON.

A record saved today renders tomorrow only if its type is registered (`load()` dispatches on
`kind`) and every field's type converts back from JSON. The kinds are discovered from
`dpviz.core.discover.record_modules()` (a scan of the source); the figures from the `plot_*` functions of `dpviz/plots/` and `dpviz/lessons/<subject>/plots.py`.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import types
import typing
from pathlib import Path

import pytest

from dpviz.core import record
from dpviz.core.discover import record_modules
from dpviz.core.record import load, save

ROOT = Path(__file__).resolve().parents[1]
for _module in sorted(set(record_modules().values())):
    importlib.import_module(_module)
KINDS = dict(sorted(record._KINDS.items()))


def sample(tp, depth: int = 0):
    """A value of type `tp` with every field filled (one item per collection): what a
    round trip must give back unchanged. Distinct numbers so a swapped field shows."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return sample(next(a for a in args if a is not type(None)), depth)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: sample(hints[f.name], depth + 1) for f in dataclasses.fields(tp)})
    if origin is tuple:
        return (sample(args[0], depth + 1),) if args[-1] is Ellipsis else tuple(
            sample(a, depth + 1) for a in args)
    if origin is dict:
        return {sample(args[0], depth + 1): sample(args[1], depth + 1)}
    simple = {float: 0.25 + depth, int: 3 + depth, str: f"s{depth}", bool: True,
              dict: {"k": [1, "v"]}, typing.Any: "any"}
    if tp in simple:
        return simple[tp]
    raise TypeError(f"no sample for {tp!r}: a record field of a type JSON cannot hold?")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_round_trips_through_json(kind, tmp_path):
    value = sample(KINDS[kind])
    loaded = load(save(value, tmp_path / f"{kind}.json"), expect=KINDS[kind])
    assert loaded == value


def _plot_functions():
    """(module, function, names of the classes its first parameter is annotated with)."""
    for path in sorted([*(ROOT / "dpviz" / "plots").glob("*.py"), *(ROOT / "dpviz" / "lessons").glob("*/plots.py")]):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("plot_") and node.args.args:
                annotation = node.args.args[0].annotation
                names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)} if annotation else set()
                module = path.stem if path.parent.name == "plots" else f"lessons.{path.parent.name}.plots"
                yield module, node.name, names


PLOTS = list(_plot_functions())
CONTAINERS = {"Sequence", "Iterable", "list", "tuple", "dict", "str", "float", "int", "None"}


def test_plots_are_discovered():
    assert ("lessons.precision.plots", "plot_underflow", {"Underflow"}) in PLOTS
    assert len(PLOTS) > 40


@pytest.mark.parametrize("module, function, names", PLOTS, ids=[f"{m}.{f}" for m, f, _ in PLOTS])
def test_what_a_figure_draws_is_a_record_kind(module, function, names):
    """The first parameter of every plot_*: a record kind or a collection of them (a plain
    number, e.g. a model's parameter count, draws a model, not a recorded result)."""
    kinds = {cls.__name__ for cls in KINDS.values()}
    assert names - CONTAINERS <= kinds, f"{module}.{function} draws {names - CONTAINERS - kinds}"

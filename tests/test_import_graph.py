"""dpviz's import graph, read statically: the layers are folders imported one way, no cycles
between modules or between folders (not even through imports inside functions), and no module
imports another's private names."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dpviz"


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import in module `name`, anywhere in it."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("dpviz")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("dpviz"):
                continue
            for a in node.names:   # `from pkg import module` imports the module
                sub = f"{target}.{a.name}"
                out.append((sub, []) if sub in MODULES else (target, [a.name]))
    return out


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name in MODULES:
        deps = set()
        for target, _ in _imports(name):
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read():
    graph = _graph()
    assert "dpviz.engine.launch" in graph["dpviz.engine.ddp_run"]
    assert "dpviz.core.record" in graph["dpviz.lessons.buckets.records"]


# What each layer may import (ARCHITECTURE.md): app → lessons → engine, analysis → core, with
# the shared drawing (plots, widgets) torch-free beside the lessons, above the analysis.
LAYERS = {
    "core": {"core"},
    "analysis": {"core", "analysis"},
    "engine": {"core", "analysis", "engine"},
    "plots": {"core", "analysis", "plots"},
    "widgets": {"core", "analysis", "plots", "widgets"},
    "lessons": {"core", "analysis", "engine", "plots", "widgets", "lessons"},
    "app": {"core", "analysis", "engine", "plots", "widgets", "lessons", "app"},
}
LOOSE = {"dpviz", "dpviz.__main__"}   # the facade and `python -m dpviz`


def _layer(module: str) -> str:
    return module.split(".")[1]


def test_every_module_is_in_a_layer_and_few_are_loose():
    assert {m for m in MODULES if m.count(".") < 2 and m not in LOOSE} <= {f"dpviz.{k}" for k in LAYERS}
    assert len([p for p in PACKAGE.glob("*.py")]) <= 6


def _arrows_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((name, dep) for name, deps in graph.items() if name not in LOOSE
                  for dep in deps if _layer(dep) not in LAYERS[_layer(name)])


def test_no_layer_imports_a_higher_one():
    assert _arrows_up(_graph()) == []


def _folder(module: str) -> str:
    path = MODULES[module]
    return ".".join(path.parent.relative_to(ROOT).parts)


def _folder_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, deps in _graph().items():
        graph.setdefault(_folder(name), set()).update(_folder(d) for d in deps if _folder(d) != _folder(name))
    return graph


def test_no_cycle_between_folders():
    """Each folder one node (a lesson, a layer, `app/commands`): no two lean on each other."""
    graph = {k: v for k, v in _folder_graph().items() if k != "dpviz"}
    assert _cycles({k: v - {"dpviz"} for k, v in graph.items()}) == []


def test_the_layer_check_sees_an_arrow_up():
    graph = {"dpviz.engine.warm_ranks": {"dpviz.lessons.buckets.records", "dpviz.core.config"},
             "dpviz.core.config": {"dpviz.core.link"}, "dpviz.plots.style": {"dpviz.engine.launch"}}
    assert _arrows_up(graph) == [("dpviz.engine.warm_ranks", "dpviz.lessons.buckets.records"),
                                 ("dpviz.plots.style", "dpviz.engine.launch")]


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_another_modules_private_names():
    private = [(name, target, n) for name in MODULES for target, names in _imports(name)
               for n in names if n.startswith("_") and not n.startswith("__")]
    assert private == []

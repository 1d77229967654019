"""The render side never needs torch: every renderer and record module imports without it.

Data flows one way (run → record → render), so a record saved today renders tomorrow on a
machine with no torch. Two guards, over modules discovered from the tree (not a hand-kept list):

1. In a fresh interpreter where `import torch` (and `torch.*`) raises, every renderer
   (`dpviz/plots/*`, `dpviz/lessons/<subject>/plots.py`, `dpviz/widgets/*`, `dpviz/lessons/<subject>/widgets.py`,
   `dpviz/app/scene.py`, `animations/*.py`) and every record module (`discover.record_modules()`,
   `dpviz/lessons/<subject>/records.py`, every package's `__init__`, every module of `dpviz/core/`
   and `dpviz/analysis/`) imports, and nothing even tried to import torch.
2. Statically, what importing such a module loads (its module-level imports, followed through
   dpviz) contains no module that imports torch anywhere, even inside a function: a renderer
   that reaches rank code can call into torch while drawing. No exceptions: a subject keeps
   its records and analysis in a module of their own, apart from its rank code (issue 15).
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpviz.core.discover import record_modules

ROOT = Path(__file__).resolve().parents[1]
SCENES = ROOT / "animations"


def _module_name(path: Path) -> str:
    if path.parent == SCENES:
        return path.stem  # a scene file is loaded by its path, as a top-level module
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


SOURCES = {_module_name(p): p for p in [*ROOT.glob("dpviz/**/*.py"), *SCENES.glob("*.py")]}
RENDERERS = sorted(_module_name(p) for p in [*ROOT.glob("dpviz/plots/*.py"), ROOT / "dpviz/app/scene.py",
                                             *ROOT.glob("dpviz/lessons/*/plots.py"), *ROOT.glob("dpviz/widgets/*.py"),
                                             *ROOT.glob("dpviz/lessons/*/widgets.py"), *SCENES.glob("*.py")])
# a subject package's records, and the package itself: importing dpviz.lessons.<subject>.records
# runs dpviz/lessons/<subject>/__init__.py first, so neither may reach torch; and the torch-free layers
RECORDS = sorted({*record_modules().values(), "dpviz.core.record",
                  *(_module_name(p) for p in ROOT.glob("dpviz/lessons/*/records.py")),
                  *(_module_name(p) for p in [*ROOT.glob("dpviz/*/__init__.py"),
                                              *ROOT.glob("dpviz/lessons/*/__init__.py"),
                                              *ROOT.glob("dpviz/core/*.py"), *ROOT.glob("dpviz/analysis/*.py")])})
CHECKED = sorted({*RENDERERS, *RECORDS})

BLOCK_TORCH = """
import importlib, importlib.abc, json, sys
tried = []
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            tried.append(name)
            raise ImportError(f"torch is blocked: {name}")
sys.meta_path.insert(0, NoTorch())
sys.path.insert(0, SCENES)
failed = {}
for name in MODULES:
    try:
        importlib.import_module(name)
    except Exception as err:
        failed[name] = f"{type(err).__name__}: {err}"
print(json.dumps({"failed": failed, "tried": sorted(set(tried)),
                  "loaded": "torch" in sys.modules}))
"""


@pytest.fixture(scope="module")
def without_torch() -> dict:
    """Import every checked module in one interpreter where torch cannot be imported."""
    code = f"SCENES = {str(SCENES)!r}\nMODULES = {CHECKED!r}\n{BLOCK_TORCH}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_discovers_every_layer():
    assert {"dpviz.plots.timeline", "dpviz.widgets.slider", "dpviz.app.scene", "ring",
            "dpviz.lessons.collectives.record", "dpviz.core.record"} <= set(CHECKED)
    assert set(record_modules().values()) <= set(CHECKED)


def test_nothing_tried_to_import_torch(without_torch):
    assert without_torch["tried"] == [] and not without_torch["loaded"]


@pytest.mark.parametrize("module", CHECKED)
def test_imports_without_torch(module, without_torch):
    assert module not in without_torch["failed"], without_torch["failed"].get(module)


# --- static: what importing a module loads, and whether any of it is torch code -------------

def _imports(name: str, nodes) -> set[str]:
    """Absolute module names an import statement may load (`from a import b` may be a.b)."""
    path = SOURCES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
            continue
        base = node.module or ""
        if node.level:
            anchor = package
            for _ in range(node.level - 1):
                anchor = anchor.rpartition(".")[0]
            base = ".".join(part for part in (anchor, node.module) if part)
        out |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return out


def _module_level(body):
    """Import statements that run on import: not those inside functions, nor those under
    `if TYPE_CHECKING:` (read by editors and type checkers only)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            yield from _module_level(node.orelse)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                yield from _module_level(getattr(node, field, None) or [])


def _with_packages(names: set[str]) -> set[str]:
    """Importing a.b.c imports a and a.b first."""
    return {".".join(n.split(".")[:k]) for n in names for k in range(1, n.count(".") + 2)}


def _tree(name: str) -> ast.Module:
    return ast.parse(SOURCES[name].read_text())


def loads(name: str) -> set[str]:
    """The dpviz and scene modules importing `name` loads, itself included."""
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        found = _with_packages(_imports(current, _module_level(_tree(current).body)) | {current})
        todo += sorted(m for m in found if m in SOURCES)
    return seen


def imports_torch(name: str) -> bool:
    """Whether the module imports torch anywhere, module level or inside a function."""
    nodes = [n for n in ast.walk(_tree(name)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return any(m == "torch" or m.startswith("torch.") for m in _imports(name, nodes))


def torch_code_loaded_by(name: str) -> list[str]:
    return sorted(m for m in loads(name) if imports_torch(m))


def test_the_static_view_sees_torch_code():
    assert imports_torch("dpviz.engine.launch") and not imports_torch("dpviz.core.record")
    assert "dpviz.core.record" in loads("dpviz.plots.timeline")


@pytest.mark.parametrize("module", CHECKED)
def test_loads_no_torch_code(module):
    assert torch_code_loaded_by(module) == []

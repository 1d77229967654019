"""Every name a benchmark or script imports from dpviz exists: a rename in the library breaks
`make bench` here, not when someone next measures."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.py")])


def dpviz_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) for every `from dpviz… import name` in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dpviz":
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name.split(".")[0] == "dpviz"]
    return found


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_dpviz_name_a_script_imports_exists(path):
    for module, name in dpviz_imports(path):
        imported = importlib.import_module(module)
        if name and not hasattr(imported, name):
            importlib.import_module(f"{module}.{name}")   # a submodule is importable by name


def test_the_check_sees_a_missing_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from dpviz.widgets.slider import NoSuchPanel\n")
    with pytest.raises(ModuleNotFoundError):
        test_every_dpviz_name_a_script_imports_exists(bad)

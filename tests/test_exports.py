"""The public verbs resolve, and `import dpviz` pulls in no torch."""
from __future__ import annotations

import subprocess
import sys

import dpviz


def test_every_public_name_resolves():
    for name in dpviz.__all__:
        assert getattr(dpviz, name) is not None, name


def test_import_dpviz_needs_no_torch():
    code = "import sys; import dpviz; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_no_public_name_shadows_a_submodule():
    """`from dpviz import x` must give the module x when dpviz has one (e.g. dpviz.lessons.dp_vs_ddp.live)."""
    import pkgutil

    modules = {m.name for m in pkgutil.iter_modules(dpviz.__path__)}
    assert not modules & set(dpviz.__all__)


def test_the_spelled_out_facade_equals_what_the_modules_declare():
    """dpviz/__init__.py's TYPE_CHECKING imports (what an editor follows) name exactly the
    `FACADE` declarations `dpviz.<name>` resolves at run time, each from its module."""
    import ast
    from pathlib import Path

    from dpviz.core.discover import facade_exports

    tree = ast.parse(Path(dpviz.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    spelled = {a.name: node.module.removeprefix("dpviz.") for node in block.body for a in node.names}
    assert spelled == facade_exports()

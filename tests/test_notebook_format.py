"""Notebooks are stored as JupyterLab writes them (scripts/normalize_notebooks.py): opening one
in JupyterLab and closing it unrun must not ask "Save your work?" (tests/test_browser.py opens
one and checks that it is not marked modified)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _normalizer():
    spec = importlib.util.spec_from_file_location("normalize_notebooks", ROOT / "scripts" / "normalize_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_notebook_is_stored_as_jupyterlab_writes_it():
    stale = _normalizer().not_normalized(NOTEBOOKS)
    assert stale == [], ("run `.venv/bin/python scripts/normalize_notebooks.py`: "
                         + ", ".join(p.name for p in stale))


def test_normalizing_sets_jupyterlabs_metadata_keeps_the_cells_and_is_idempotent():
    norm = _normalizer()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# é"), nbformat.v4.new_code_cell("x = 1\ny = 2")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    text = json.dumps(nb, indent=2)   # another layout: keys unsorted, indent 2, no newline at the end
    once = norm.normalized(text)
    assert norm.normalized(once) == once
    assert once.endswith("}\n") and once.startswith('{\n "cells": [\n  {\n')   # nbformat's: indent 1, sorted
    stored = json.loads(once)
    assert stored["metadata"]["kernelspec"]["display_name"] == "Python 3 (ipykernel)"
    assert stored["metadata"]["language_info"]["name"] == "python"
    assert stored["metadata"]["language_info"]["pygments_lexer"] == "ipython3"
    assert [c["source"] for c in stored["cells"]] == [["# é"], ["x = 1\n", "y = 2"]]   # as lines, UTF-8 kept
    assert (stored["nbformat"], stored["nbformat_minor"]) == (nb.nbformat, nb.nbformat_minor)


def test_the_check_mode_writes_nothing_and_fails_on_a_stale_notebook(tmp_path):
    norm = _normalizer()
    path = tmp_path / "t.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), path)
    before = path.read_text()
    assert norm.main(["--check", str(path)]) == 1 and path.read_text() == before
    assert norm.main([str(path)]) == 0 and path.read_text() != before
    assert norm.main(["--check", str(path)]) == 0

"""Every label of every figure a notebook draws can be read: no two overlap (tick labels
included), none sits on a bar it cannot be read on, none is under 7 pt, and no title names fewer
models than the figure draws; and no cell prints to stderr. Each notebook runs top to bottom
(as nbval runs it) with tests/notebook_figures.py hooked into its kernel, which checks every
matplotlib figure made in a cell — pyplot's and the sliders' own — with matplotlib's text
boxes (dpviz.plots.legibility), on the live data the notebook recorded. Labels that
`place_labels` could neither keep nor move are listed with the reason they were hidden."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
HOOK = Path(__file__).with_name("notebook_figures.py")
# Known findings of the under-7-pt check still open, notebook → why, run as strict xfails (the
# test fails once they read): none. A figure no wider than the notebook column keeps its type.
TOO_SMALL: dict[str, str] = {}
NOTEBOOKS = [pytest.param(p, id=p.stem, marks=pytest.mark.xfail(strict=True, reason=TOO_SMALL[p.stem]))
             if p.stem in TOO_SMALL else pytest.param(p, id=p.stem)
             for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_every_label_of_the_notebooks_figures_reads(path, tmp_path, monkeypatch):
    log = tmp_path / "figures.jsonl"
    log.touch()
    monkeypatch.setenv("DPVIZ_FIGURE_LOG", str(log))
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"exec(open({str(HOOK)!r}).read())"))
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    # a learner reads red stderr text as an error: no cell may print any (issue 30: notebook 12's
    # in-process profiler printed USDT lines)
    stderr = [(i, "".join(o.get("text", ""))[:300]) for i, cell in enumerate(nb.cells[1:], start=1)
              for o in cell.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    assert stderr == [], "cells printed to stderr"
    figures = [json.loads(line) for line in log.read_text().splitlines()]
    assert [f for f in figures if "error" in f] == []   # every figure was measured
    for fig in figures:
        for text, why in fig["hidden"]:   # said, not failed: each was tried in every position first
            print(f"{path.stem}: cell {fig['cell']!r}: label {text!r} hidden ({why})")
            assert why, fig
    smallest = min((f["smallest_pt"] for f in figures if f["smallest_pt"] is not None), default=None)
    print(f"{path.stem}: {len(figures)} figures checked, smallest type {smallest} pt as shown")
    collisions = [(fig["cell"], fig["titles"], fig["overlaps"]) for fig in figures if fig["overlaps"]]
    assert collisions == [], f"{len(figures)} figures checked"
    for check in ("over_bars", "small", "titles_missing"):
        unreadable = [(fig["cell"], fig["titles"], fig[check]) for fig in figures if fig[check]]
        assert unreadable == [], f"{check}: {len(figures)} figures checked"

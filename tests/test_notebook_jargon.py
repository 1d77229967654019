"""No notebook prints or draws a term before the course explains it. The notebooks are read in
order (00, 01, 02, 02b, 03, …): a term counts as explained once a markdown cell of this notebook,
above the cell that prints it, or of an earlier notebook explains it (`TERMS`). What a cell prints (stdout) and
the labels of every figure it draws come from the executed notebook: the same hooked kernel log
tests/test_notebook_legibility.py reads (tests/notebook_figures.py), from `make test`'s nbval run
where DPVIZ_FIGURE_LOG_DIR names it, else from running the notebook here.

The terms are those a learner met unexplained (issue 42 items 11 and 19): 00 printed "spans" and
"exposed" in its set-up check, 01 printed "α" and "bucket rebuild" before notebooks 02 and 03
taught them, 09's axis read "Pos / Pos+g / Pos+g+p"."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from notebook_figures import fingerprint
from test_notebook_legibility import LOG_DIR, NOTEBOOKS, NotRun, code_cells, run_hooked, runs_by_notebook

ORDER = [p.values[0] for p in NOTEBOOKS]   # sorted by name: the reading order 00 lays out
# term → (how a notebook prints or draws it, how markdown explains it). Naming a term is not
# explaining it (00's map says "exposed communication" and "α + bytes/β" in passing): a term is
# explained where markdown writes it in bold, the notebooks' mark of a definition, or says what
# it is in the words given here.
TERMS = {
    "α": (re.compile(r"α"), re.compile(r"\*\*α\*\*|fixed (cost )?α")),
    "bucket rebuild": (re.compile(r"bucket[- ]rebuild", re.IGNORECASE),
                       re.compile(r"\*\*bucket rebuild\*\*|\*?rebuilds\*? (its |the )?buckets in (the|that) order")),
    "spans": (re.compile(r"\bspans\b"), re.compile(r"\*\*spans\*\*")),
    "exposed": (re.compile(r"\bexposed\b", re.IGNORECASE), re.compile(r"\*\*exposed\*\*")),
    "P_os": (re.compile(r"\bP_?os\b"), re.compile(r"\bP_os \(")),
}


def markdown(path: Path) -> str:
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")


def outputs_by_cell(lines: list[dict]) -> list[str]:
    """What each code cell printed and drew, in the order the kernel ran them (stdout and
    figure labels logged while a cell ran carry its fingerprint; its "ran" line closes it)."""
    out, current = [], []
    for line in lines:
        if line["kind"] == "stdout":
            current.append(line["text"])
        elif line["kind"] == "figure":
            current += line.get("texts", [])
        elif line["kind"] == "ran":
            out.append("\n".join(current))
            current = []
    return out


def unexplained(path: Path, lines: list[dict] | None, order: list[Path] = ORDER) -> list[tuple[str, str]]:
    """(cell's first line, term) for each term a code cell printed or drew before any markdown
    of this notebook above it, or of an earlier notebook, explained it."""
    if lines is None:
        raise NotRun(f"{path.stem}: no hooked kernel ran every code cell of it in order")
    explained = "\n".join(markdown(p) for p in order[:order.index(path)])
    printed = iter(outputs_by_cell(lines))
    found = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            explained += "\n" + cell.source
        elif cell.cell_type == "code" and cell.source.strip():
            text = next(printed)
            found += [(cell.source.strip().splitlines()[0][:80], term) for term, (used, explains)
                      in TERMS.items() if used.search(text) and not explains.search(explained)]
    return found


@pytest.fixture(scope="module")
def logged_runs() -> dict[Path, list[dict]] | None:
    """The notebooks' lines from the run that tested them, or None to run each here."""
    import os

    log_dir = os.environ.get(LOG_DIR)
    return runs_by_notebook(Path(log_dir), ORDER) if log_dir else None


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS)
def test_no_notebook_prints_a_term_before_it_is_explained(path, logged_runs, tmp_path, monkeypatch):
    runs = logged_runs if logged_runs is not None else run_hooked(path, tmp_path, monkeypatch)
    assert unexplained(path, runs.get(path)) == []


def test_09b_says_its_psi_is_parameter_bytes():
    """Issue 42 item 8: Ψ counts parameters in 09 and bytes in 09b, and 09b's "Ψ/N + Ψ — more
    than DDP's full replica" holds for parameter bytes only (DDP also holds gradients and Adam's
    state). 09b says which Ψ it means before it first uses it, and that comparison names them."""
    path = next(p for p in ORDER if p.stem.startswith("09b"))
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    first = next(c for c in cells if "Ψ" in c)
    assert re.search(r"Ψ stands for the parameters' \*\*bytes\*\*", first), first[:300]
    for sentence in re.split(r"(?<=[.:])\s", " ".join(cells)):
        if "Ψ/N + Ψ" in sentence and "DDP" in sentence:
            assert "parameter" in sentence, sentence


# The checker on hand-written logs: a term printed where it was only named, and once explained.
def write_notebook(tmp_path: Path, cells: list) -> Path:
    nb = nbformat.v4.new_notebook(cells=cells)
    path = tmp_path / "t.ipynb"
    nbformat.write(nb, path)
    return path


def test_the_checker_finds_a_term_printed_before_its_explanation(tmp_path):
    cells = [nbformat.v4.new_markdown_cell("each transfer takes α + bytes/β"),   # named, not explained
             nbformat.v4.new_code_cell("print(x)"), nbformat.v4.new_markdown_cell("**α**: a fixed latency"),
             nbformat.v4.new_code_cell("plot(x)")]
    path = write_notebook(tmp_path, cells)
    first, second = (fingerprint(s) for s in code_cells(path))
    lines = [{"kind": "stdout", "cell": first, "text": "link: α 340 µs, 16 spans"}, {"kind": "ran", "cell": first},
             {"kind": "figure", "cell": second, "texts": ["α", "exposed 3 ms"]}, {"kind": "ran", "cell": second}]
    assert unexplained(path, lines, [path]) == [("print(x)", "α"), ("print(x)", "spans"), ("plot(x)", "exposed")]
    with pytest.raises(NotRun):
        unexplained(path, None, [path])

"""The course notebooks executed headless: one run shared by `dpviz tour` and `dpviz book`."""
from __future__ import annotations

from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"   # dpviz/app/ → the checkout


def notebook_paths(folder: str | Path = NOTEBOOKS, only: list[str] | None = None) -> list[Path]:
    """The .ipynb files in `folder` in course order; `only` keeps those whose name starts with
    one of its prefixes (e.g. ["01", "07"])."""
    folder = Path(folder)
    paths = sorted(folder.glob("*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no notebooks in {folder}")
    if only:
        paths = [p for p in paths if p.name.startswith(tuple(only))]
        if not paths:
            raise ValueError(f"no notebook in {folder} starts with any of {only}")
    return paths


def execute(path: Path, timeout_s: int = 300):
    """Run a notebook top to bottom in a fresh kernel, in its own folder; the executed node.
    Every figure in it comes from the live runs made now; a failing cell raises, naming it."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=timeout_s, resources={"metadata": {"path": str(path.parent)}}).execute()
    return notebook

"""Store notebooks exactly as JupyterLab writes them, so that opening one and closing it unrun
does not ask "Save your work?".

JupyterLab marks a notebook modified as soon as its kernel connects if the stored metadata
differs from what it sets then: the kernelspec's display name ("Python 3 (ipykernel)") and the
kernel's full `language_info` (its Python version included). It saves through jupyter_server,
which writes with nbformat: indent 1, sorted keys, sources split into lines, a trailing newline.
This script writes that form (idempotent: a second run changes nothing). `language_info` is
ipykernel's own, for the Python running this script: run it with the .venv's Python, the one
the notebooks' kernel runs (tests/test_notebook_format.py checks every notebook is normalized;
tests/test_browser.py opens one in JupyterLab and checks it is not marked modified).

    .venv/bin/python scripts/normalize_notebooks.py            # every notebook in notebooks/
    .venv/bin/python scripts/normalize_notebooks.py --check    # list those not normalized, exit 1
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def language_info() -> dict:
    """What the python3 kernel reports in its kernel_info reply, which JupyterLab stores."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


def normalized(text: str) -> str:
    """The notebook `text` as JupyterLab saves it after opening it: same cells and outputs
    (no upgrade: nbformat's minor version is kept), JupyterLab's kernel metadata, nbformat's
    JSON layout."""
    nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    nb.metadata["kernelspec"] = nbformat.from_dict(KERNELSPEC)
    nb.metadata["language_info"] = nbformat.from_dict(language_info())
    out = nbformat.writes(nb, version=nbformat.NO_CONVERT)
    return out if out.endswith("\n") else out + "\n"


def not_normalized(paths: list[Path]) -> list[Path]:
    """The notebooks among `paths` whose stored text is not `normalized`."""
    return [p for p in paths if normalized(p.read_text(encoding="utf-8")) != p.read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: notebooks/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if any is not normalized")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "notebooks").glob("*.ipynb"))
    stale = not_normalized(paths)
    for path in stale:
        if args.check:
            print(f"not normalized: {path}")
        else:
            path.write_text(normalized(path.read_text(encoding="utf-8")), encoding="utf-8")
            print(f"normalized: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

"""`dpviz tour --out DIR`: execute every notebook headless and write it as HTML.

The main job without a browser: every figure in the HTML comes from the live runs made while
executing. A notebook that fails stops the tour with its name and the error.
"""
from __future__ import annotations

import time

from dpviz.app.notebooks import NOTEBOOKS
from dpviz.core.config import writable_dir

NAME = "tour"
HELP = "execute every notebook headless and write HTML pages (the tour, without a browser)"


def add_arguments(p) -> None:
    p.add_argument("--out", default="out/tour", help="folder for the HTML pages (default %(default)s)")
    p.add_argument("--notebooks", default=str(NOTEBOOKS), help="folder of .ipynb files")
    p.add_argument("--timeout", type=int, default=300, help="seconds per cell before giving up")


def main(args) -> int:
    from nbconvert import HTMLExporter
    from tqdm import tqdm

    from dpviz.app.notebooks import execute, notebook_paths

    paths = notebook_paths(args.notebooks)
    out = writable_dir(args.out)
    exporter = HTMLExporter()
    for path in (bar := tqdm(paths, unit="notebook")):
        bar.set_description(path.stem)
        t0 = time.perf_counter()
        html, _ = exporter.from_notebook_node(execute(path, args.timeout))
        (out / f"{path.stem}.html").write_text(html)
        bar.write(f"{path.stem}: {time.perf_counter() - t0:.1f} s")
    print(f"wrote {len(paths)} pages to {out}/ — open {out}/00_tour.html")
    return 0

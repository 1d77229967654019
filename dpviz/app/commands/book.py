"""`dpviz book --out DIR`: the course site (notebooks executed live, figures, videos) as HTML."""
from __future__ import annotations

from dpviz.app.notebooks import NOTEBOOKS
from dpviz.core.arguments import comma_list

NAME = "book"
HELP = "build the course site: every notebook executed headless, figures, widgets, videos (Sphinx + myst-nb)"


def add_arguments(p) -> None:
    p.add_argument("--out", default="out/book", help="folder for the site (html/) and its sources (src/)")
    p.add_argument("--only", type=comma_list(str), help="notebook name prefixes to include, e.g. 01,07 (default: all)")
    p.add_argument("--scenes", type=comma_list(str), help="animations to embed, e.g. ring (default: all)")
    p.add_argument("--notebooks", default=str(NOTEBOOKS), help="folder of .ipynb files")
    p.add_argument("--timeout", type=int, default=300, help="seconds per cell before giving up")


def main(args) -> int:
    from dpviz.app.book import build_book

    index = build_book(args.out, only=args.only, scenes=args.scenes, timeout_s=args.timeout,
                       notebooks=args.notebooks)
    print(f"wrote the site: open {index}")
    return 0

"""The course site a teacher hands out: the notebooks executed on live ranks, their figures
and widgets' initial state, and the animations as videos, built by Sphinx with myst-nb.

Orchestration only: notebooks run through `dpviz.app.notebooks.execute` (the same run as
`dpviz tour`), videos through `dpviz.app.export.export_all`; Sphinx renders what they made.
Nothing is fetched at build or view time: the widget JavaScript comes from node_modules/.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from dpviz.app.notebooks import NOTEBOOKS, execute, notebook_paths
from dpviz.core.config import writable_dir

ROOT = Path(__file__).resolve().parents[2]   # the checkout: dpviz/app/book.py
WIDGET_JS = {  # file in the site's _static/ → where `npm install` (make book) puts it
    "require.js": ROOT / "node_modules" / "requirejs" / "require.js",
    "embed-amd.js": ROOT / "node_modules" / "@jupyter-widgets" / "html-manager" / "dist" / "embed-amd.js",
}


def build_book(out: str | os.PathLike, only: list[str] | None = None,
               scenes: list[str] | None = None, timeout_s: int = 300,
               notebooks: str | os.PathLike = NOTEBOOKS, log=print) -> Path:
    """Build the site into `out`/html; returns its index.html. `only` (name prefixes) and
    `scenes` pick a subset (the browser test builds one notebook and one video)."""
    from sphinx.cmd.build import build_main

    from dpviz.app.animate import SCENES
    from dpviz.app.export import export_all

    missing = [str(p) for p in WIDGET_JS.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"widget JavaScript not installed ({', '.join(missing)}): run "
                                "`npm install` in the checkout (make book does)")
    scenes = list(SCENES) if scenes is None else scenes
    paths = notebook_paths(notebooks, only)   # bad input fails before anything runs
    out = writable_dir(out)
    src = out / "src"
    shutil.rmtree(src, ignore_errors=True)
    static = writable_dir(src / "_static")
    shutil.copy(ROOT / "book" / "conf.py", src / "conf.py")
    for name, path in WIDGET_JS.items():
        shutil.copy(path, static / name)
    import nbformat

    for path in paths:
        t0 = time.perf_counter()
        nbformat.write(execute(path, timeout_s), src / path.name)
        log(f"{path.stem}: executed in {time.perf_counter() - t0:.1f} s")
    pages = [p.stem for p in paths]
    for path in sorted(Path(notebooks).glob("*.md")):   # pages the notebooks link to (ERRATA.md)
        shutil.copy(path, src / path.name)
        pages.append(path.stem)
    if scenes:
        t0 = time.perf_counter()
        videos = export_all(static / "animations", names=scenes)
        log(f"animations: {len(videos)} recorded live and rendered in {time.perf_counter() - t0:.1f} s")
        (src / "animations.md").write_text(_animations_page(videos))
        pages.append("animations")
    (src / "index.md").write_text(_index_page(pages))
    t0 = time.perf_counter()
    if build_main(["-b", "html", "-q", "-W", "--keep-going", str(src), str(out / "html")]) != 0:
        raise RuntimeError(f"sphinx could not build the site from {src}; its messages are above")
    _copy_widget_fonts(out / "html")
    log(f"site: built in {time.perf_counter() - t0:.1f} s → {out / 'html' / 'index.html'}")
    return out / "html" / "index.html"


WIDGET_FONTS = WIDGET_JS["embed-amd.js"].parent   # the widgets' icon fonts (font-awesome)
FONT_SUFFIXES = (".woff2", ".woff", ".ttf", ".eot", ".svg")


def _copy_widget_fonts(html: Path) -> None:
    """embed-amd.js's stylesheet asks for its icon fonts under @jupyter-widgets/ and
    @jupyter-widgets/html-manager/dist/ beside the page (webpack's public path): put them
    in both, or widget icons fall back to empty boxes and the site logs missing files."""
    for folder in (html / "@jupyter-widgets", html / "@jupyter-widgets" / "html-manager" / "dist"):
        folder.mkdir(parents=True, exist_ok=True)
        for font in WIDGET_FONTS.iterdir():
            if font.suffix in FONT_SUFFIXES:
                shutil.copy(font, folder / font.name)


def _index_page(pages: list[str]) -> str:
    toc = "\n".join(pages)
    return f"""# dpviz: data-parallel training, live

Every figure on these pages was drawn from a real run: the notebooks were executed top to
bottom on live gloo ranks (CPU) when this site was built. Sliders show their first state; to
move them (each move re-runs the ranks), open the notebooks in JupyterLab (`make lab`).

```{{toctree}}
:maxdepth: 1

{toc}
```
"""


def _animations_page(videos: list[Path]) -> str:
    blocks = "\n\n".join(
        f"## {v.stem}\n\n<video controls muted preload=\"metadata\" width=\"720\" "
        f"src=\"_static/animations/{v.name}\"></video>" for v in videos)
    return f"""# Animations

Rendered with manim from records of live runs made while this site was built
(`dpviz animate all` does the same; `--format png` gives one still per step for slides).

{blocks}
"""

"""The course site a teacher hands out: the notebooks executed on live ranks, their figures,
their widgets with every position recorded at build time (`dpviz.widgets.recorded`: they move
in the page with no kernel), and the animations as videos, built by Sphinx with myst-nb.

Orchestration only: notebooks run through `dpviz.app.notebooks.execute` (the same run as
`dpviz tour`), videos through `dpviz.app.export.export_all`; Sphinx renders what they made.
Nothing is fetched at build or view time: the widget JavaScript comes from node_modules/.
"""
from __future__ import annotations

import os
import platform
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from dpviz.app.notebooks import NOTEBOOKS, execute, notebook_paths
from dpviz.core.config import writable_dir
from dpviz.widgets.recorded import ENV as RECORD_ENV, LOG_ENV as RECORD_LOG_ENV

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

    with recording_widgets(build_tag(), out / "recording.log", log):
        for path in paths:
            t0 = time.perf_counter()
            log(f"{path.stem}: executing on live ranks, recording its widgets' positions")
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
    # doctrees beside the site, not in it (Sphinx's default): they hold every recorded view again
    if build_main(["-b", "html", "-q", "-W", "--keep-going", "-d", str(out / "doctrees"), str(src),
                   str(out / "html")]) != 0:
        raise RuntimeError(f"sphinx could not build the site from {src}; its messages are above")
    _copy_widget_fonts(out / "html")
    log(f"site: built in {time.perf_counter() - t0:.1f} s → {out / 'html' / 'index.html'}")
    return out / "html" / "index.html"


def build_tag() -> str:
    """What each recorded widget view says it is: where and when it was recorded."""
    return f"recorded at build time on {machine()}, {time.strftime('%Y-%m-%d', time.gmtime())}"


def machine() -> str:
    """This machine in a few words: its CPU model (Linux's /proc/cpuinfo) and the cores this
    process may use, e.g. 'AMD EPYC 7B13, 2 cores'."""
    model = platform.machine() or "an unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {cores} core{'s' * (cores != 1)}"


@contextmanager
def recording_widgets(tag: str, progress: Path, log=print):
    """Kernels started inside the block (they inherit this environment) record every position
    of each panel they build (`dpviz.widgets.recorded`), tagged `tag`; the progress lines they
    append to the file `progress` are passed to `log` as they come. The kernels run in the
    notebooks' folder, so they are given the file's absolute path."""
    before = {name: os.environ.get(name) for name in (RECORD_ENV, RECORD_LOG_ENV)}
    progress = Path(progress).resolve()
    progress.write_text("")
    os.environ.update({RECORD_ENV: tag, RECORD_LOG_ENV: str(progress)})
    done = threading.Event()
    follower = threading.Thread(target=_follow, args=(progress, done, log), daemon=True)
    follower.start()
    try:
        yield
    finally:
        done.set()
        follower.join()
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _follow(path: Path, done: threading.Event, log) -> None:
    """Pass each line appended to `path` to `log` until `done` is set (then the last ones)."""
    with open(path) as lines:
        while True:
            finished = done.is_set()
            for line in lines.readlines():
                log(line.rstrip("\n"))
            if finished:
                return
            done.wait(0.2)


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
bottom on live gloo ranks (CPU) when this site was built. Sliders and toggles move here with
no server: each position was run on the notebook's ranks while the site was built, and its
figure says so ("recorded at build time on …"). To run new positions live, open the
notebooks in JupyterLab (`make lab`): there every move re-runs the ranks.

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

"""Open a built course site in headless chromium, offline, and check every page.

`make book` writes out/book/html; `python scripts/check_site.py out/book/html` serves it on
127.0.0.1, opens every notebook page, and checks what a teacher handing it out relies on:
each page renders its title, every image loads, the widgets' saved figures show, every video
on the animations page plays, and nothing is fetched from outside the site. tests/test_book.py
runs the same check on a one-notebook build in CI; this runs it on the whole course.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"                       # Debian's; never `playwright install`
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@dataclass
class SiteReport:
    pages: dict[str, int] = field(default_factory=dict)      # page → images loaded
    videos: dict[str, int] = field(default_factory=dict)     # video src → width while playing
    problems: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)         # requests that left the site
    missing: list[str] = field(default_factory=list)         # files the site asks for but lacks

    @property
    def ok(self) -> bool:
        return not self.problems and not self.outside and not self.missing


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site; a file the site names but lacks is a problem, not a log line."""
    missing: list[str]

    def log_message(self, format, *args) -> None:
        pass

    def send_error(self, code, message=None, explain=None) -> None:
        if code == 404:
            self.missing.append(self.path)
        super().send_error(code, message, explain)


@contextmanager
def serve(folder: Path, missing: list[str] | None = None):
    """The folder over HTTP on 127.0.0.1 (a free port), for as long as the block runs; paths
    asked for but absent are appended to `missing`."""
    handler = functools.partial(type("Handler", (_QuietHandler,), {"missing": [] if missing is None else missing}),
                                directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def notebook_pages(folder: Path) -> list[str]:
    """The notebook pages Sphinx wrote (NN_name.html), in course order."""
    return sorted(p.name for p in folder.glob("[0-9][0-9]_*.html"))


def check_page(page, url: str, report: SiteReport) -> None:
    page.goto(url)
    page.wait_for_load_state("load")
    name = url.rsplit("/", 1)[-1]
    if not page.locator("h1").count():
        report.problems.append(f"{name}: no title")
    page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=60_000)
    widths = page.evaluate("() => [...document.images].map(i => i.naturalWidth)")
    broken = [w for w in widths if w <= 100]
    if broken:
        report.problems.append(f"{name}: {len(broken)} of {len(widths)} images did not load")
    report.pages[name] = len(widths) - len(broken)
    views = page.locator("script[type='application/vnd.jupyter.widget-view+json']").count()
    if views:
        try:   # the widgets' saved state is drawn by script: each view becomes a .jupyter-widgets
            page.wait_for_function(f"() => document.querySelectorAll('.jupyter-widgets').length >= {views}",
                                   timeout=60_000)
        except Exception as err:
            report.problems.append(f"{name}: {views} widget(s) saved but not drawn ({type(err).__name__})")


def check_videos(page, url: str, report: SiteReport) -> None:
    page.goto(url)
    count = page.locator("video").count()
    if not count:
        report.problems.append("animations page has no video")
    for i in range(count):
        src = page.evaluate(f"() => document.querySelectorAll('video')[{i}].currentSrc") or f"video {i}"
        page.evaluate(f"() => {{ const v = document.querySelectorAll('video')[{i}]; v.muted = true; return v.play(); }}")
        try:
            page.wait_for_function(f"() => document.querySelectorAll('video')[{i}].currentTime > 0.5",
                                   timeout=60_000)
            report.videos[src.rsplit("/", 1)[-1]] = page.evaluate(
                f"() => document.querySelectorAll('video')[{i}].videoWidth")
        except Exception as err:   # playwright's TimeoutError: say which video, go on
            report.problems.append(f"{src}: did not play ({type(err).__name__})")


def check_site(folder: Path, pages: list[str] | None = None) -> SiteReport:
    """Every notebook page (or `pages`) and every video of a built site, in chromium, offline."""
    from playwright.sync_api import sync_playwright

    folder = Path(folder)
    if not (folder / "index.html").is_file():
        raise FileNotFoundError(f"{folder} has no index.html: build it with `make book`")
    report = SiteReport()
    with serve(folder, report.missing) as site, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(site)
                       else (report.outside.append(route.request.url), route.abort()))
            for name in ["index.html", *(pages if pages is not None else notebook_pages(folder))]:
                check_page(page, f"{site}/{name}", report)
            if (folder / "animations.html").is_file():
                check_videos(page, f"{site}/animations.html", report)
        finally:
            browser.close()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. out/book/html")
    args = parser.parse_args(argv)
    report = check_site(args.site)
    for name, images in report.pages.items():
        print(f"{name}: {images} images loaded")
    for src, width in report.videos.items():
        print(f"video {src}: plays, {width} px wide")
    for line in report.problems + [f"outside request: {u}" for u in report.outside] \
            + [f"missing file: {u}" for u in report.missing]:
        print(f"PROBLEM {line}")
    print(f"{len(report.pages)} pages, {len(report.videos)} videos: {'ok' if report.ok else 'NOT ok'}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

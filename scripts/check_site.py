"""Open a built course site in headless chromium, offline, and check every page.

`make book` writes out/book/html and runs `python scripts/check_site.py out/book/html`: it serves
the site on 127.0.0.1, opens every notebook page, and checks what a teacher handing it out
relies on: each page renders its title, every image loads, the widgets' saved figures show,
every control of every recorded panel (`dpviz.widgets.recorded`) moves through recorded
positions with no kernel (a new figure and status line each move, tagged as recorded, drawn
within 100 ms), every video on the animations page plays, the console logs no error, and
nothing is fetched from outside the site. tests/test_book.py runs the same check on a
one-notebook build in CI.
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
    panels: int = 0                                           # recorded widget panels
    controls: int = 0                                         # their controls, each moved
    move_ms: list[float] = field(default_factory=list)        # each move, input to new view drawn
    console: list[str] = field(default_factory=list)          # console errors and page errors
    slow: list[str] = field(default_factory=list)             # moves over MOVE_BUDGET_MS (a timing:
                                                              # the script fails on it, tests do not)

    @property
    def ok(self) -> bool:
        return not (self.problems or self.outside or self.missing or self.console or self.slow)


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
    """The notebook pages Sphinx wrote (NN_name.html, NNb_name.html), in course order."""
    return sorted(p.name for p in folder.glob("[0-9][0-9]*_*.html"))   # 02b, 09b too


# In the page: the recorded panels (scripts' view of dpviz.widgets.recorded), their controls, and
# one move of a control timed from the input event to the new view drawn with its figures loaded.
PANELS_JS = """() => [...document.querySelectorAll('.dpviz-recorded')].map(stack =>
    controlsOf(stack).map(c => [c.kind, c.disabled]))"""
HELPERS_JS = """
window.controlsOf = stack => {   // the controls marked with the Stack's key (dpviz.widgets.recorded)
  const key = [...stack.classList].find(c => c.startsWith('dpviz-stack-')).slice('dpviz-stack-'.length);
  const out = [];
  for (const el of document.querySelectorAll('.dpviz-moves-' + key)) {
    if (el.classList.contains('widget-slider')) {
      out.push({kind: 'slider', el, handle: el.querySelector('.noUi-handle'),
                disabled: !!el.querySelector('[disabled]')});
    } else if (el.classList.contains('widget-toggle-buttons')) {
      out.push({kind: 'toggles', el, disabled: !!el.querySelector('button:disabled')});
    } else out.push({kind: 'dropdown', el, disabled: el.querySelector('select').disabled});
  }
  return out;
};
window.leafOf = stack => stack.querySelector('.dpviz-recorded-view');
window.sigOf = async leaf => {
  const figs = [];
  for (const img of leaf.querySelectorAll('img')) {
    const bytes = await (await fetch(img.src)).arrayBuffer();
    figs.push([...new Uint8Array(await crypto.subtle.digest('SHA-256', bytes))].join(','));
  }
  const text = [...leaf.querySelectorAll('.widget-label, .widget-html')]
    .filter(e => !e.classList.contains('dpviz-recorded-tag')).map(e => e.textContent).join('|');
  const tag = leaf.querySelector('.dpviz-recorded-tag');
  return {figs: figs.join(';'), text, tag: tag ? tag.textContent.trim() : ''};
};
window.moveControl = async (panelIndex, controlIndex, direction) => {
  const stack = document.querySelectorAll('.dpviz-recorded')[panelIndex];
  const control = controlsOf(stack)[controlIndex];
  const old = leafOf(stack), before = await sigOf(old);
  const parts = leaf => [leaf.querySelectorAll('img').length, leaf.querySelectorAll('.widget-label, .widget-html').length];
  const wanted = parts(old).join();
  let done;
  const drawn = new Promise(resolve => { done = resolve; });
  const check = () => {   // drawn: a new view, as many figures and lines as the old, every figure decoded
    const leaf = leafOf(stack);
    if (leaf && leaf !== old && parts(leaf).join() === wanted
        && [...leaf.querySelectorAll('img')].every(i => i.complete && i.naturalWidth > 0))
      done(performance.now());
  };
  const observer = new MutationObserver(check);
  observer.observe(stack, {childList: true, subtree: true, attributes: true});
  stack.addEventListener('load', check, true);
  const t0 = performance.now();
  if (control.kind === 'slider') {
    const h = control.handle, now = +h.getAttribute('aria-valuenow'), max = +h.getAttribute('aria-valuemax');
    const min = +h.getAttribute('aria-valuemin');
    direction = (direction > 0 && now < max) || now <= min ? 1 : -1;   // on until an end, then back
    const key = direction > 0 ? 'ArrowRight' : 'ArrowLeft';
    h.dispatchEvent(new KeyboardEvent('keydown', {key, bubbles: true, cancelable: true}));
  } else if (control.kind === 'toggles') {
    const buttons = [...control.el.querySelectorAll('button')];
    const i = buttons.findIndex(b => b.classList.contains('mod-active'));
    buttons[(i + 1) % buttons.length].click();
  } else {
    const select = control.el.querySelector('select');
    select.selectedIndex = (select.selectedIndex + 1) % select.options.length;
    select.dispatchEvent(new Event('change', {bubbles: true}));
  }
  const timeout = new Promise(resolve => setTimeout(() => resolve(null), 10000));
  const t1 = await Promise.race([drawn, timeout]);
  observer.disconnect();
  stack.removeEventListener('load', check, true);
  if (t1 === null) return {ms: null};
  const after = await sigOf(leafOf(stack));
  return {ms: t1 - t0, figure: after.figs !== before.figs, text: after.text !== before.text,
          has_text: after.text.length > 0, tag: after.tag, direction};
};
"""
MOVES_PER_CONTROL = 3       # the "at least three positions" a control
MOVE_BUDGET_MS = 100.0      # a recorded move must feel instant


def check_controls(page, name: str, report: SiteReport) -> None:
    """Move every control of every recorded panel on the page MOVES_PER_CONTROL times (none
    may be greyed); each move must show a new view with a different figure (and status line,
    where the view has one), carry the build's tag, and be drawn within MOVE_BUDGET_MS."""
    page.evaluate(f"() => {{ {HELPERS_JS} }}")
    # a reader moves a control once the page has settled, not while it still draws the rest
    page.wait_for_load_state("networkidle")
    page.evaluate("() => new Promise(done => requestIdleCallback(done, {timeout: 2000}))")
    for p, kinds in enumerate(page.evaluate(PANELS_JS)):
        report.panels += 1
        for c, (kind, disabled) in enumerate(kinds):
            report.controls += 1
            if disabled:   # a greyed control: the page cannot move it
                report.problems.append(f"{name}: panel {p + 1}, {kind} {c + 1} is greyed")
                continue
            direction = 1   # a slider goes on until an end, then back: its moves show >= 3 positions
            for move in range(MOVES_PER_CONTROL):
                where = f"{name}: panel {p + 1}, {kind} {c + 1}, move {move + 1}"
                result = page.evaluate("([p, c, d]) => moveControl(p, c, d)", [p, c, direction])
                if result["ms"] is None:
                    report.problems.append(f"{where}: no new view within 10 s")
                    continue
                direction = result["direction"]
                report.move_ms.append(result["ms"])
                if not result["figure"]:
                    report.problems.append(f"{where}: the figure did not change")
                if result["has_text"] and not result["text"]:
                    report.problems.append(f"{where}: the status line did not change")
                if not result["tag"].startswith("recorded at build time on "):
                    report.problems.append(f"{where}: the view is not tagged as recorded ({result['tag']!r})")
                if result["ms"] > MOVE_BUDGET_MS:
                    report.slow.append(f"{where}: took {result['ms']:.0f} ms (budget {MOVE_BUDGET_MS:.0f})")


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
            return
        check_controls(page, name, report)


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
            page.on("console", lambda m: report.console.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda err: report.console.append(str(err)))
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
            + [f"missing file: {u}" for u in report.missing] + [f"console: {m}" for m in report.console] \
            + [f"slow move: {m}" for m in report.slow]:
        print(f"PROBLEM {line}")
    if report.move_ms:
        moves = sorted(report.move_ms)
        print(f"{report.panels} recorded panels, {report.controls} controls, {len(moves)} positions moved to: median "
              f"{moves[len(moves) // 2]:.1f} ms, worst {moves[-1]:.1f} ms")
    print(f"{len(report.pages)} pages, {len(report.videos)} videos: {'ok' if report.ok else 'NOT ok'}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

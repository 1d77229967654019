"""The course site: `dpviz book` on a subset (one notebook, one animation: the whole course is
`make book`, too slow for every CI run), opened in headless chromium with the network cut off.
The pages render, every figure loads, the widgets draw their initial state, the video plays."""
from __future__ import annotations

import functools
import http.server
import os
import threading

import pytest

from dpviz.book import WIDGET_JS, build_book

from test_browser import CHROMIUM, CHROMIUM_ARGS


def test_unknown_notebooks_are_refused_before_anything_runs(tmp_path):
    if not all(p.is_file() for p in WIDGET_JS.values()):
        pytest.skip("node_modules not installed (make book / make test run npm install)")
    with pytest.raises(ValueError, match="no notebook .* starts with"):
        build_book(tmp_path, only=["99"], scenes=[])
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built from notebook 01 and the ring animation, served on 127.0.0.1."""
    out = tmp_path_factory.mktemp("book")
    index = build_book(out, only=["01"], scenes=["ring"])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(index.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.mark.browser
@pytest.mark.manim
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian chromium")
def test_site_opens_offline_with_figures_widgets_and_a_playing_video(site):
    from playwright.sync_api import sync_playwright

    outside = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(site)
                       else (outside.append(route.request.url), route.abort()))
            page.goto(f"{site}/index.html")
            assert "dpviz" in page.locator("h1").first.text_content()
            page.get_by_role("link", name="DDP from scratch", exact=False).first.click()
            page.wait_for_load_state("load")
            images = page.locator("img")
            assert images.count() >= 2
            widget_figure = page.locator("img.widget-image").first      # the stepper, initial state
            widget_figure.wait_for(timeout=60_000)
            page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=60_000)
            widths = page.evaluate("() => [...document.images].map(i => i.naturalWidth)")
            assert all(w > 100 for w in widths), f"an image did not load: widths {widths}"

            page.goto(f"{site}/animations.html")
            video = page.locator("video").first
            video.wait_for(timeout=30_000)
            page.evaluate("() => document.querySelector('video').play()")
            page.wait_for_function("() => document.querySelector('video').currentTime > 0.5", timeout=60_000)
            assert page.evaluate("() => document.querySelector('video').videoWidth") >= 640
        finally:
            browser.close()
    assert outside == [], f"the site asked the network for {outside}"

"""The course site: `dpviz book` on a subset (one notebook, one animation: the whole course is
`make book`, too slow for every CI run), opened in headless chromium with the network cut off.
The pages render, every figure loads, the widgets draw their initial state, the video plays."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from dpviz.app.book import WIDGET_JS, build_book

from test_browser import CHROMIUM

ROOT = Path(__file__).resolve().parents[1]


def test_unknown_notebooks_are_refused_before_anything_runs(tmp_path):
    if not all(p.is_file() for p in WIDGET_JS.values()):
        pytest.skip("node_modules not installed (make book / make test run npm install)")
    with pytest.raises(ValueError, match="no notebook .* starts with"):
        build_book(tmp_path, only=["99"], scenes=[])
    assert list(tmp_path.iterdir()) == []


def _check_site():
    """scripts/check_site.py: the same check `make book` runs on the whole site."""
    spec = importlib.util.spec_from_file_location("check_site", ROOT / "scripts" / "check_site.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_site"] = module     # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built from notebook 01 and the ring animation."""
    out = tmp_path_factory.mktemp("book")
    return build_book(out, only=["01"], scenes=["ring"]).parent


@pytest.mark.browser
@pytest.mark.manim
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian chromium")
def test_site_opens_offline_with_figures_widgets_and_a_playing_video(site):
    check_site = _check_site()
    report = check_site.check_site(site)
    assert report.outside == [], f"the site asked the network for {report.outside}"
    assert report.problems == []
    assert report.console == []
    page = next(name for name in report.pages if name.startswith("01_"))
    assert report.pages[page] >= 2          # the timeline figure and the stepper's first frame
    # the step slider moved offline through recorded steps, each a new figure (an unchanged one
    # is a problem: none above); how fast is the script's to judge (report.slow), not a test's
    assert all(ms > 0 for ms in report.move_ms)
    assert report.panels == 1 and report.controls == 1
    assert len(report.move_ms) == check_site.MOVES_PER_CONTROL
    assert len(report.videos) == 1 and min(report.videos.values()) >= 640

"""dpviz report: one offline HTML page, from a live run's folder and from loaded traces,
opened in a real browser (Debian chromium, as tests/test_browser.py) with the network cut."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from dpviz.app.cli import main as cli
from test_browser import CHROMIUM, CHROMIUM_ARGS

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """A report of the live straggler run's folder and one of the two loaded gloo traces."""
    tmp = tmp_path_factory.mktemp("report")
    assert cli(["run", "--ranks", "2", "--steps", "3", "--slow-rank", "1", "--delay-ms", "100",
                "--out", str(tmp / "run")]) == 0
    assert cli(["report", str(tmp / "run"), "--out", str(tmp / "live.html")]) == 0
    assert cli(["report", *map(str, sorted((DATA / "dpviz-gloo-2rank").glob("*.json.gz"))),
                "--out", str(tmp / "loaded.html")]) == 0
    return {"live": tmp / "live.html", "loaded": tmp / "loaded.html"}


@pytest.mark.parametrize("which", ["live", "loaded"])
def test_report_is_one_self_contained_file(reports, which):
    page = reports[which].read_text()
    assert not re.search(r"""(src|href)=['"](?!data:)""", page)   # nothing fetched
    assert page.count("data:image/png;base64,") == 2              # timeline, collectives
    for section in ("Every rank's timeline", "Per step", "temporal breakdown", "stragglers"):
        assert section in page
    assert "rank 0 waited ms" in page and "rank 1 waited ms" in page


def test_live_report_names_the_slowed_rank(reports):
    page = reports["live"].read_text()
    assert "Buckets as DDP's comm hook saw them" in page     # only a live run has a comm hook
    assert "Buckets as DDP" not in reports["loaded"].read_text()
    rows = re.findall(r"<tr><td>(\d+)</td><td>(rank \d)</td><td>rank \d, rank \d</td>", page)
    assert [who for _, who in rows] == ["rank 1"] * 3


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian chromium")
@pytest.mark.parametrize("which", ["live", "loaded"])
def test_report_renders_offline_in_a_browser(reports, which):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            asked = []
            page.route(re.compile(r"^(?!file:|data:).*"),
                       lambda route: (asked.append(route.request.url), route.abort()))
            page.goto(reports[which].resolve().as_uri())
            sizes = page.eval_on_selector_all(
                "img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
            assert len(sizes) == 2 and all(done and w > 300 and h > 100 for done, w, h in sizes)
            assert page.locator("table").count() >= 3
            assert asked == []
        finally:
            browser.close()


@pytest.fixture(scope="module")
def trace_reports(tmp_path_factory):
    """Reports of real traces at 2 ranks and at ~400 collectives per step, and of 16
    hand-built ranks."""
    from handmade_traces import ddp_gpu_rank

    tmp = tmp_path_factory.mktemp("trace-reports")
    sixteen = [str(ddp_gpu_rank(r, world_size=16).write(tmp / "sixteen" / f"rank{r}.json.gz"))
               for r in range(16)]
    inputs = {"2-ranks": [str(DATA / "nccl-sampled-ranks")],
              "400-collectives": [str(DATA / "nccl-400-allreduces")], "16-ranks": sixteen}
    for name, args in inputs.items():
        assert cli(["report", *args, "--out", str(tmp / f"{name}.html")]) == 0
    return {name: tmp / f"{name}.html" for name in inputs}


def test_trace_reports_say_the_step_rule_and_what_is_not_measured(trace_reports):
    page = trace_reports["2-ranks"].read_text()
    assert "analysed steps 551 (552 dropped: the last ProfilerStep may be cut short" in page
    assert "collectives ran on one loaded rank with no loaded peer" in page   # sampled ranks
    big = trace_reports["400-collectives"].read_text()
    assert "No message size recorded for the 404 collectives" in big and big.count("data:image/png") == 1


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian chromium")
@pytest.mark.parametrize("which", ["2-ranks", "400-collectives", "16-ranks"])
def test_trace_reports_read_in_a_browser(trace_reports, which):
    """Every figure loads, none is taller than a screen or two, nothing is fetched; the
    full page is photographed into tests/artifacts/report-<which>.png."""
    from playwright.sync_api import sync_playwright

    from test_browser import ARTIFACTS

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            asked = []
            page.route(re.compile(r"^(?!file:|data:).*"),
                       lambda route: (asked.append(route.request.url), route.abort()))
            page.goto(trace_reports[which].resolve().as_uri())
            sizes = page.eval_on_selector_all(
                "img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight, i.width, i.height])")
            assert sizes and all(done and w > 300 and 100 < h for done, w, h, _, _ in sizes)
            assert all(shown_h <= 2000 for *_, shown_h in sizes)      # 16 ranks: about two screens
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280   # wide tables scroll
            assert asked == []
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"report-{which}.png"), full_page=True)
        finally:
            browser.close()

"""A real browser: JupyterLab on 127.0.0.1 in headless Debian chromium, a dpviz notebook run
through the UI, a widget slider moved, and the figure checked to have really changed (pixels).
The bucket-cap slider's key press → new figure image is measured and logged (not asserted:
speed is measured, a timed test would fail under load).

Screenshots and the latency log are kept in tests/artifacts/ (ignored by git).
"""
from __future__ import annotations

import io
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from listening import beyond_loopback, listening

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOTEBOOK = "01_ddp_from_scratch.ipynb"
CAP_NOTEBOOK = "cap_slider.ipynb"  # written by the fixture: 2 warm ranks, the bucket-cap slider
FIGURE = "img.widget-image"  # the stepper's figure: an Image widget redrawn in place

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian chromium")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving a copy of the notebooks, bound to 127.0.0.1 with a random token."""
    root = tmp_path_factory.mktemp("lab")
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, root / NOTEBOOK)
    _write_cap_notebook(root / CAP_NOTEBOOK)
    for name, _ in SECTIONS.values():
        shutil.copy(ROOT / "notebooks" / name, root / name)
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip", "127.0.0.1",
           f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--ServerApp.disable_check_xsrf=False", "--LabApp.news_url=None"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    settings = root / "lab-settings"   # the same defaults `make lab` uses: no news prompt
    shutil.copytree(ROOT / "scripts" / "lab-settings", settings)
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "JUPYTER_PLATFORM_DIRS": "1",
                                   "JUPYTERLAB_SETTINGS_DIR": str(settings)})
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2), 60)
        yield url, token, server.pid
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()


# the timing sections photographed (notebook, code cell id); DPVIZ_SCREENSHOT_TAG names the
# shots `<section>-<tag>.png` (run this file in an older checkout with "before" to compare)
SECTIONS = {"03-s3": ("03_buckets_and_overlap.ipynb", "7c7e8d76"),
            "04-s2": ("04_gradient_accumulation.ipynb", "6377ee5f")}
SCREENSHOT_TAG = os.environ.get("DPVIZ_SCREENSHOT_TAG", "now")


def _write_cap_notebook(path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import dpviz\nfrom dpviz import bucket_cap_slider\n"
                                          "cluster = dpviz.Cluster(2)"),
                nbformat.v4.new_code_cell("bucket_cap_slider(cluster)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _wait_for(probe, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return probe()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def _accept_kernel_dialog(page) -> None:
    """JupyterLab may ask which kernel to start; the notebook's own (python3) is preselected."""
    select = page.get_by_role("button", name="Select", exact=True)
    try:
        select.wait_for(timeout=10_000)
    except Exception:
        return  # no dialog: the kernel started by itself
    select.click()


def _kernel_ready(url: str, token: str) -> bool:
    """Has the server a kernel that started and waits for work (its REST API says so)?"""
    import json

    with urllib.request.urlopen(f"{url}/api/kernels?token={token}", timeout=5) as reply:
        kernels = json.load(reply)
    if not any(k.get("execution_state") == "idle" for k in kernels):
        raise RuntimeError(f"no idle kernel yet: {kernels}")
    return True


def _open(page, url: str, token: str, notebook: str) -> None:
    """Open `notebook` in JupyterLab and wait until its kernel is up."""
    page.goto(f"{url}/lab/tree/{notebook}?reset&token={token}")   # reset: only this notebook open
    page.locator(".jp-Notebook").wait_for(timeout=90_000)
    _accept_kernel_dialog(page)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=90_000)
    _wait_for(lambda: _kernel_ready(url, token), 120)   # the page can say idle before the kernel is up


def _run_all(page, url: str, token: str, notebook: str, timeout_ms: int = 600_000) -> None:
    """Open `notebook` in JupyterLab, Run All Cells, wait until the last cell has run."""
    _open(page, url, token, notebook)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_text("Run All Cells", exact=True).click()
    _wait_until_ran(page, page.locator(".jp-CodeCell").last, timeout_ms)


def _run_through(page, url: str, token: str, notebook: str, index: int,
                 timeout_ms: int = 600_000) -> None:
    """Open `notebook` in JupyterLab and run its cells up to and including cell `index` (the
    cell after it selected, then Run All Above Selected Cell): what a learner runs to reach
    that section, and not the sections after it, which nbval runs."""
    _open(page, url, token, notebook)
    page.locator(".jp-Cell").nth(index + 1).locator(".jp-InputPrompt").click()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_text("Run All Above Selected Cell", exact=True).click()
    _wait_until_ran(page, page.locator(".jp-Cell").nth(index), timeout_ms)


# A run stops at a cell that raised and leaves the kernel idle: an idle kernel this long
# with the last cell not run means the run stopped (between two queued cells it is idle for
# milliseconds), so the test fails then, saying why, instead of at its whole timeout.
STOPPED_IDLE_S = 30


def _wait_until_ran(page, last, timeout_ms: int) -> None:
    """Wait until the cell `last` shows its execution number (e.g. "[12]:"), every cell up to
    it done; fail as soon as the kernel sits idle without it, with the errors the page shows."""
    done = last.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]"))
    idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    deadline, idle_since = time.monotonic() + timeout_ms / 1e3, None
    while time.monotonic() < deadline:
        if done.count():
            return
        idle_since = (idle_since or time.monotonic()) if idle.count() else None
        if idle_since is not None and time.monotonic() - idle_since > STOPPED_IDLE_S:
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            ran = page.locator(".jp-CodeCell .jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).count()
            raise AssertionError(f"the run stopped after {ran} numbered cells, the kernel idle for "
                                 f"{STOPPED_IDLE_S} s; errors shown: "
                                 + (" | ".join(errors.all_inner_texts())[-3000:] or "none in view"))
        time.sleep(1)
    raise AssertionError(f"the notebook did not finish within {timeout_ms / 1e3:.0f} s")


def test_notebook_runs_in_jupyterlab_and_the_slider_redraws_the_figure(lab):
    from playwright.sync_api import sync_playwright

    url, token, server = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _run_all(page, url, token, NOTEBOOK)
            slider = page.locator(".widget-slider .noUi-handle").first
            slider.wait_for(timeout=60_000)
            figure = page.locator(FIGURE).first
            figure.wait_for(timeout=60_000)
            figure.scroll_into_view_if_needed()
            before_src = figure.get_attribute("src")
            before = figure.screenshot(path=str(ARTIFACTS / "browser-before.png"))

            slider.focus()
            page.keyboard.press("ArrowRight")  # step 0 (one bucket) → step 1 (rebuilt buckets)
            changed_src = ("(src) => { const i = document.querySelector('%s');"
                           " return i !== null && i.getAttribute('src') !== src; }" % FIGURE)
            page.wait_for_function(changed_src, arg=before_src, timeout=120_000)
            figure = page.locator(FIGURE).first
            after = figure.screenshot(path=str(ARTIFACTS / "browser-after.png"))
            page.screenshot(path=str(ARTIFACTS / "browser-page.png"), full_page=False)
            # any red stderr text reads as an error to a learner, not only a traceback
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            assert errors.count() == 0, errors.all_inner_texts()
            # JupyterLab as `make lab` starts it and its kernel (the notebook closed its ranks;
            # warm ranks are test_loopback_only's): all on loopback
            sockets = listening(server)
            assert len({pid for pid, _, _ in sockets}) >= 2, sockets   # the server, the kernel
            assert beyond_loopback(sockets) == set(), sockets
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "browser-failure.png"), full_page=True)
            raise
        finally:
            browser.close()

    a, b = _pixels(before), _pixels(after)
    assert a.shape[0] > 100 and a.shape[1] > 300, "the figure should be a real plot"
    h, w = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
    changed = np.any(np.abs(a[:h, :w] - b[:h, :w]) > 30, axis=-1).mean()
    assert changed > 0.01, f"only {changed:.2%} of the figure's pixels changed"


# In the page: the time of the last key press, and of the last new figure image loaded.
_LATENCY_PROBE = """() => {
  window.__dpviz = {key: null, loaded: []};
  document.addEventListener('keydown', () => { window.__dpviz.key = performance.now(); }, true);
  document.querySelector('%s').addEventListener('load', () => {
    window.__dpviz.loaded.push(performance.now()); });
}""" % FIGURE


def test_cap_slider_key_press_to_new_figure_is_measured(lab):
    """Arrow keys on the bucket-cap slider; each press must bring a new image (asserted); the
    time from key press to the image loaded is logged to tests/artifacts/browser-knob-latency.txt
    beside the kernel-side time the panel's status label reports."""
    from playwright.sync_api import sync_playwright

    url, token, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    lines = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _run_all(page, url, token, CAP_NOTEBOOK)
            figure = page.locator(FIGURE).first
            figure.wait_for(timeout=120_000)
            page.evaluate(_LATENCY_PROBE)
            slider = page.locator(".widget-slider .noUi-handle").first
            status = page.locator(".widget-label").filter(has_text="re-ran live").first
            for i, key in enumerate(["ArrowRight", "ArrowLeft"] * 4):  # 1.0 ↔ 2.0 MiB
                before = figure.get_attribute("src")
                slider.focus()
                page.keyboard.press(key)
                page.wait_for_function("(n) => window.__dpviz.loaded.length > n", arg=i, timeout=120_000)
                assert figure.get_attribute("src") != before, f"move {i}: the figure did not change"
                ms = page.evaluate("() => window.__dpviz.loaded.at(-1) - window.__dpviz.key")
                lines.append(f"move {i} ({key}): key press -> new figure image {ms / 1e3:.3f} s; "
                             f"kernel: {status.text_content()}")
            # the run's numbers are the caption above the figure (HTML, not pixels), shown too
            caption = page.locator(".widget-html").filter(has_text="exposed communication").first
            assert caption.is_visible() and "live run" in caption.text_content()
            lines.append(f"caption: {caption.inner_text()}")
            figure.screenshot(path=str(ARTIFACTS / "browser-cap-slider.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "browser-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    moves = [float(re.search(r"image ([\d.]+) s", line).group(1)) for line in lines[1:-1]]  # after warm-up
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines.append(f"median after the first move: {sorted(moves)[len(moves) // 2]:.3f} s "
                 f"(load average {load})")
    (ARTIFACTS / "browser-knob-latency.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_timing_sections_run_in_jupyterlab_and_are_photographed(lab, section):
    import json

    from playwright.sync_api import sync_playwright

    name, cell_id = SECTIONS[section]
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    index = next(i for i, c in enumerate(cells) if c.get("id") == cell_id)
    url, token, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"{section}-{SCREENSHOT_TAG}.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _run_through(page, url, token, name, index, timeout_ms=900_000)
            cell = page.locator(".jp-Cell").nth(index)
            cell.scroll_into_view_if_needed()
            cell.locator(".jp-OutputArea-output img").first.wait_for(timeout=60_000)
            cell.screenshot(path=str(shot))
            # any red stderr text reads as an error to a learner, not only a traceback
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            assert errors.count() == 0, errors.all_inner_texts()
        except Exception:
            page.screenshot(path=str(ARTIFACTS / f"{section}-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    assert _pixels(shot.read_bytes()).shape[0] > 200, "the section should show its figure and table"

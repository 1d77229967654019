"""A real browser: JupyterLab on 127.0.0.1 in headless Debian chromium, a dpviz notebook run
through the UI, a widget slider moved, and the figure checked to have really changed (pixels).

Screenshots are kept in tests/artifacts/ (ignored by git) for a person to look at.
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

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOTEBOOK = "01_ddp_from_scratch.ipynb"
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
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip", "127.0.0.1",
           f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--ServerApp.disable_check_xsrf=False", "--LabApp.news_url=None"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "JUPYTER_PLATFORM_DIRS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2), 60)
        yield url, token
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()


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


def test_notebook_runs_in_jupyterlab_and_the_slider_redraws_the_figure(lab):
    from playwright.sync_api import sync_playwright

    url, token = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/lab/tree/{NOTEBOOK}?token={token}")
            page.locator(".jp-Notebook").wait_for(timeout=90_000)
            _accept_kernel_dialog(page)
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=90_000)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_text("Run All Cells", exact=True).click()

            # every cell done: the last cell shows its execution number, e.g. "[12]:"
            page.locator(".jp-Cell").last.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(timeout=600_000)
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
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] >> text=Traceback")
            assert errors.count() == 0
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

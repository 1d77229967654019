"""A real browser: JupyterLab on 127.0.0.1 in headless Debian chromium, a dpviz notebook run
through the UI, a widget slider moved, and the figure checked to have really changed (pixels).
The bucket-cap slider's key press → new figure image is measured and logged (not asserted:
speed is measured, a timed test would fail under load).

Screenshots and the latency log are kept in tests/artifacts/ (ignored by git).
"""
from __future__ import annotations

import io
import json
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
    for name in {name for name, _ in SECTIONS.values()} | {KNOBS_NOTEBOOK, OPENED_NOTEBOOK}:
        shutil.copy(ROOT / "notebooks" / name, root / name)
    _write_stale_copy(ROOT / "notebooks" / OPENED_NOTEBOOK, root / STALE_NOTEBOOK)
    _write_clipped_notebook(root / CLIPPED_NOTEBOOK)
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip", "127.0.0.1",
           f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--ServerApp.disable_check_xsrf=False", "--LabApp.news_url=None",
           "--LabApp.expose_app_in_browser=True"]   # window.jupyterapp: a kernel's metadata awaited, not slept on
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


@pytest.fixture(scope="module")
def chromium():
    """One headless chromium for the module's tests (each opens its own page): starting
    Playwright's driver and a browser per test cost seconds each and tested nothing."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# the timing sections photographed: (notebook, ids of the code cells run: the set-up cells the
# section reads, then the section's own cell, photographed). The sections between are not run
# here: nbval runs every cell. DPVIZ_SCREENSHOT_TAG names the shots `<section>-<tag>.png` (run
# this file in an older checkout with "before" to compare)
SECTIONS = {"03-s3": ("03_buckets_and_overlap.ipynb", ("aac452d0", "7c7e8d76")),
            "04-s2": ("04_gradient_accumulation.ipynb", ("2b9c2c5f", "6377ee5f"))}
SCREENSHOT_TAG = os.environ.get("DPVIZ_SCREENSHOT_TAG", "now")


# 09b's FSDP knob panel: its imports and cluster, the cell that sets `cfg`, the panel
KNOBS_NOTEBOOK, KNOBS_CELLS = "09b_zero3_in_time.ipynb", ("2996abad", "7bc7e86d", "6d6e69b7")
OPENED_NOTEBOOK = "00_tour.ipynb"   # opened and closed unrun: it must not read as modified
STALE_NOTEBOOK = "stale_metadata.ipynb"   # the same, stored as before normalizing: it must


CLIPPED_NOTEBOOK = "clipped_widgets.ipynb"   # widgets whose text ipywidgets' CSS cuts off


def _write_clipped_notebook(path: Path) -> None:
    """Toggles with ipywidgets' fixed button width and a long Label: what 09b and 03 showed cut
    off before their fixes ("reshard after for…", "…and DD"), for the check's own check."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import ipywidgets as w\n"
        "w.VBox([w.ToggleButtons(options=['reshard after forward', 'keep until backward']),\n"
        "        w.HBox([w.IntSlider(), w.Label('bucket_cap_mb=4: re-ran live in 0.41 s, drawn in 0.12 s; ' * 6)])])")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _write_stale_copy(source: Path, path: Path) -> None:
    """`source` with the kernel metadata notebooks carried before scripts/normalize_notebooks.py:
    JupyterLab rewrites it on opening, so this copy opens modified (the check's own check)."""
    nb = json.loads(source.read_text())
    nb["metadata"] = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    path.write_text(json.dumps(nb, indent=1) + "\n")


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


def _kernel_up(url: str, token: str, notebook: str) -> bool:
    """Has the server a kernel for `notebook` that started and waits for work (its REST API
    says so)? Other tests' kernels stay up beside it in the module's JupyterLab."""
    with urllib.request.urlopen(f"{url}/api/sessions?token={token}", timeout=5) as reply:
        sessions = json.load(reply)
    return any(s.get("path", "").endswith(notebook) and (s.get("kernel") or {}).get("execution_state") == "idle"
               for s in sessions)


def _open(page, url: str, token: str, notebook: str, timeout_s: float = 120) -> None:
    """Open `notebook` in JupyterLab and wait until its kernel is up. JupyterLab may ask which
    kernel to start (the notebook's own, python3, is preselected): that dialog is accepted
    when it shows, polled for beside the kernel, not waited out."""
    page.goto(f"{url}/lab/tree/{notebook}?reset&token={token}")   # reset: only this notebook open
    page.locator(".jp-Notebook").wait_for(timeout=90_000)
    select = page.get_by_role("button", name="Select", exact=True)
    idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    deadline = time.monotonic() + timeout_s
    # the page can say idle before the kernel is up: both must say so
    while not (idle.count() and _kernel_up(url, token, notebook)):
        if select.count():
            select.click()
        if time.monotonic() > deadline:
            raise AssertionError(f"{notebook}: no idle kernel within {timeout_s:.0f} s")
        time.sleep(0.25)


def _run_all(page, url: str, token: str, notebook: str, timeout_ms: int = 600_000) -> None:
    """Open `notebook` in JupyterLab, Run All Cells, wait until the last cell has run."""
    _open(page, url, token, notebook)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_text("Run All Cells", exact=True).click()
    _wait_until_ran(page, page.locator(".jp-CodeCell").last, timeout_ms)


def _cell_indices(notebook: str, cell_ids: tuple[str, ...]) -> list[int]:
    """The positions of `cell_ids` among all of `notebook`'s cells (markdown too, as the page
    lists them), in the given order."""
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    where = {c.get("id"): i for i, c in enumerate(cells)}
    return [where[cell_id] for cell_id in cell_ids]


def _run_cells(page, url: str, token: str, notebook: str, indices: list[int],
               timeout_ms: int = 600_000) -> None:
    """Open `notebook` in JupyterLab and run the cells at `indices`, in order, through the Run
    menu (each selected, then Run Selected Cell and Do not Advance); wait until the last ran.
    A learner who jumps to a section runs its set-up cells and the section, as here."""
    _open(page, url, token, notebook)
    for index in indices:
        page.locator(".jp-Cell").nth(index).locator(".jp-InputPrompt").click()
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_text("Run Selected Cell and Do not Advance", exact=True).click()
    _wait_until_ran(page, page.locator(".jp-Cell").nth(indices[-1]), timeout_ms)


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


def test_notebook_runs_in_jupyterlab_and_the_slider_redraws_the_figure(lab, chromium):
    url, token, server = lab
    ARTIFACTS.mkdir(exist_ok=True)
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
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
        page.close()

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


# In the page: every widget text a learner cannot read whole, (its text, scrollWidth, clientWidth):
# an element holding text of its own whose content is wider than its box (clipped or cut to
# an ellipsis: "reshard after for…", "…and DD"). Buttons, labels, captions, slider readouts.
_CLIPPED = """() => {
  const out = [];
  for (const el of document.querySelectorAll('.jp-OutputArea-output .jupyter-widgets *')) {
    const own = [...el.childNodes].some(n => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
    if (own && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
      out.push([el.textContent.trim().slice(0, 80), el.scrollWidth, el.clientWidth]);
  }
  return out;
}"""


def _clipped_widget_texts(page) -> list:
    return page.evaluate(_CLIPPED)


def test_cap_slider_key_press_to_new_figure_is_measured(lab, chromium):
    """Arrow keys on the bucket-cap slider; each press must bring a new image (asserted); the
    time from key press to the image loaded is logged to tests/artifacts/browser-knob-latency.txt
    beside the kernel-side time the panel's status label reports."""
    url, token, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    lines = []
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _run_all(page, url, token, CAP_NOTEBOOK)
        figure = page.locator(FIGURE).first
        figure.wait_for(timeout=120_000)
        page.evaluate(_LATENCY_PROBE)
        slider = page.locator(".widget-slider .noUi-handle").first
        status = page.locator(".widget-label, .widget-html").filter(has_text="re-ran live").first
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
        assert _clipped_widget_texts(page) == [], "widget text cut off"
        figure.screenshot(path=str(ARTIFACTS / "browser-cap-slider.png"))
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "browser-failure.png"), full_page=True)
        raise
    finally:
        page.close()
    moves = [float(re.search(r"image ([\d.]+) s", line).group(1)) for line in lines[1:-1]]  # after warm-up
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines.append(f"median after the first move: {sorted(moves)[len(moves) // 2]:.3f} s "
                 f"(load average {load})")
    (ARTIFACTS / "browser-knob-latency.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_timing_sections_run_in_jupyterlab_and_are_photographed(lab, chromium, section):
    name, cell_ids = SECTIONS[section]
    indices = _cell_indices(name, cell_ids)
    index = indices[-1]
    url, token, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"{section}-{SCREENSHOT_TAG}.png"
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _run_cells(page, url, token, name, indices, timeout_ms=900_000)
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
        page.close()
    assert _pixels(shot.read_bytes()).shape[0] > 200, "the section should show its figure and table"


def _move_and_time(page, figure, move, what: str) -> float:
    """Do `move()` (a click or a key press on a knob) and wait for the new figure image; the
    seconds from the input event to the image loaded (the page's own clock)."""
    loaded = page.evaluate("() => window.__dpviz.loaded.length")
    before = figure.get_attribute("src")
    move()
    page.wait_for_function("(n) => window.__dpviz.loaded.length > n", arg=loaded, timeout=120_000)
    assert figure.get_attribute("src") != before, f"{what}: the figure did not change"
    return page.evaluate("() => window.__dpviz.loaded.at(-1) - window.__dpviz.key") / 1e3


# In the page: the time of the last click or key press, and of every new figure image loaded.
_INPUT_PROBE = """() => {
  window.__dpviz = {key: null, loaded: []};
  for (const kind of ['keydown', 'mousedown'])
    document.addEventListener(kind, () => { window.__dpviz.key = performance.now(); }, true);
  document.querySelector('%s').addEventListener('load', () => {
    window.__dpviz.loaded.push(performance.now()); });
}""" % FIGURE


def test_09b_knobs_read_whole_and_every_move_is_measured(lab, chromium):
    """09b's FSDP panel, run through JupyterLab: no toggle label, status line or caption is cut
    off (before and after the moves: status lines grow with a run's notes), and each toggle's
    click -> new figure image is logged per knob with its median to
    tests/artifacts/browser-09b-latency.txt beside the kernel's own split (run, draw)."""
    indices = _cell_indices(KNOBS_NOTEBOOK, KNOBS_CELLS)
    index = indices[-1]
    url, token, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    lines, times = [], {}
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    try:
        _run_cells(page, url, token, KNOBS_NOTEBOOK, indices, timeout_ms=900_000)
        cell = page.locator(".jp-Cell").nth(index)
        figure = cell.locator(FIGURE).first
        figure.wait_for(timeout=120_000)
        figure.scroll_into_view_if_needed()
        assert _clipped_widget_texts(page) == [], "widget text cut off before a move"
        page.evaluate(_INPUT_PROBE)   # the panel's figure is the notebook's first widget image
        status = cell.locator(".widget-label, .widget-html").filter(has_text="re-ran live").first
        for knob, (there, back) in {"prefetch": ("prefetch off", "prefetch on"),
                                    "params": ("keep until backward", "reshard after forward"),
                                    "units": ("the model as one unit", "a unit per block")}.items():
            for label in [there, back] * 2:
                button = cell.get_by_role("button", name=label, exact=True)
                seconds = _move_and_time(page, figure, button.click, label)
                times.setdefault(knob, []).append(seconds)
                lines.append(f"{knob} -> {label}: click -> new figure image {seconds:.3f} s; "
                             f"kernel: {status.text_content()}")
        assert _clipped_widget_texts(page) == [], "widget text cut off after the moves"
        cell.screenshot(path=str(ARTIFACTS / "browser-09b-knobs.png"))
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        assert errors.count() == 0, errors.all_inner_texts()
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "browser-09b-failure.png"), full_page=True)
        raise
    finally:
        page.close()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    for knob, seconds in times.items():
        lines.append(f"{knob}: median {sorted(seconds)[len(seconds) // 2]:.3f} s over {len(seconds)} moves")
    lines.append(f"(load average {load}: other work on the machine slows every move)")
    (ARTIFACTS / "browser-09b-latency.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _opens_modified(page, url: str, token: str, notebook: str) -> bool:
    """Open `notebook`, let its kernel connect (JupyterLab then writes the kernel's metadata into
    the model) and say whether its tab reads modified: closing it would ask "Save your work?"."""
    _open(page, url, token, notebook)
    dirty = page.evaluate(_METADATA_LANDED, notebook)
    page.locator(".lm-TabBar-tab.jp-mod-dirty").wait_for(state="attached" if dirty else "detached")
    return page.locator(".lm-TabBar-tab.jp-mod-dirty").count() > 0


# In the page: wait until the notebook's panel has written its kernel's metadata into the model
# (NotebookPanel does so once the kernel's info and spec promises resolve, in handlers attached
# before ours: ours run after), then say whether the model reads modified.
_METADATA_LANDED = """async (path) => {
  const app = window.jupyterapp;
  const panel = [...app.shell.widgets('main')].find(w => w.context && w.context.path.endsWith(path));
  const session = panel.sessionContext;
  while (!session.session || !session.session.kernel) await new Promise(r => setTimeout(r, 50));
  const kernel = session.session.kernel;
  await kernel.info;
  await kernel.spec;
  await new Promise(r => setTimeout(r, 0));
  return panel.context.model.dirty;
}"""


def test_a_notebook_opened_and_left_unrun_is_not_modified(lab, chromium):
    """A notebook stored as JupyterLab writes it (scripts/normalize_notebooks.py) opens clean;
    the same notebook with the metadata it had before opens modified, so the check can fail."""
    url, token, _ = lab
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    try:
        assert not _opens_modified(page, url, token, OPENED_NOTEBOOK), \
            f"{OPENED_NOTEBOOK} opens modified: run scripts/normalize_notebooks.py"
        assert _opens_modified(page, url, token, STALE_NOTEBOOK)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "browser-modified-failure.png"), full_page=True)
        raise
    finally:
        page.close()


def test_the_clipped_text_check_sees_cut_toggles_and_labels(lab, chromium):
    """The check the panels' tests use finds what ipywidgets' CSS cuts off: both fixed-width
    toggle labels and a status Label longer than its row."""
    url, token, _ = lab
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    try:
        _run_all(page, url, token, CLIPPED_NOTEBOOK)
        page.locator(".widget-toggle-button").first.wait_for(timeout=60_000)
        clipped = [text for text, *_ in _clipped_widget_texts(page)]
        assert {"reshard after forward", "keep until backward"} <= set(clipped), clipped
        assert any(t.startswith("bucket_cap_mb=4") for t in clipped), clipped
    finally:
        page.close()

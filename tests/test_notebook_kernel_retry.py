"""`make test-notebooks` loads tests/nbval_kernel_retry.py: a kernel that dies at start-up is
started again, a kernel that always dies still fails. Real kernels, from kernel specs written
here: one that dies on its first start and is ipykernel from then on, one that always dies."""
from __future__ import annotations

import json
import sys
import warnings

import pytest
from nbval_kernel_retry import TRIES, RetryingKernel

# A kernel that logs each start, dies on the first (or every) one, else is ipykernel.
KERNEL = """\
import sys
from pathlib import Path
starts = Path({starts!r})
starts.write_text(starts.read_text() + "start\\n" if starts.exists() else "start\\n")
if {always!r} or starts.read_text().count("start") == 1:
    sys.exit(1)
from ipykernel import kernelapp
kernelapp.launch_new_instance(argv=["-f", sys.argv[1]])
"""


def _kernel_spec(tmp_path, monkeypatch, always: bool):
    """A kernel spec `dies-at-start` on JUPYTER_PATH; the file its starts are logged in."""
    starts = tmp_path / "starts.log"
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL.format(starts=str(starts), always=always))
    spec = tmp_path / "jupyter" / "kernels" / "dies-at-start"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(
        {"argv": [sys.executable, str(script), "{connection_file}"], "display_name": "dies at start",
         "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return starts


def test_a_kernel_that_dies_at_start_is_started_again_and_runs(tmp_path, monkeypatch):
    starts = _kernel_spec(tmp_path, monkeypatch, always=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = RetryingKernel("dies-at-start", cwd=str(tmp_path), startup_timeout=60)
    try:
        # the first start dies by design; under load a later one can die too, of the race the
        # plugin is for (a kernel port taken by another process before the kernel binds it)
        starts_made = starts.read_text().count("start")
        assert 2 <= starts_made <= TRIES
        assert [str(w.message).split(" (")[0] for w in caught] == \
            [f"kernel start {n} of {TRIES} failed" for n in range(1, starts_made)]
        assert kernel.kc.is_alive()
    finally:
        kernel.stop()


def test_a_kernel_that_always_dies_fails_after_every_try(tmp_path, monkeypatch):
    starts = _kernel_spec(tmp_path, monkeypatch, always=True)
    with pytest.warns(UserWarning, match="starting it again"), pytest.raises(RuntimeError, match="died"):
        RetryingKernel("dies-at-start", cwd=str(tmp_path), startup_timeout=60)
    assert starts.read_text().count("start") == TRIES

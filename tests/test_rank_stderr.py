"""The ranks' stderr reaches the terminal and notebook cells without kineto's USDT lines,
and with every real warning, error and traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dpviz.engine.rank_stderr import LineFilter, drop_profiler_lines

TESTS = Path(__file__).parent
START = b"USDT:2026-11-23 16:34:55 9987:9987 SyncActivityProfilerHandler.cpp:52] profiler_start"
STOP = b"USDT:2026-11-23 16:34:55 9986:9986 SyncActivityProfilerHandler.cpp:59] profiler_stop"


def test_drops_exactly_the_profiler_records_even_run_together():
    data = (START + b"\n" + b"UserWarning: a real one\n" + STOP + START + b"\n"
            + b"Traceback (most recent call last):\n" + b"RuntimeError: boom" + STOP + b"\n"
            + b"\n" + b"USDT: someone else's line\n")
    assert drop_profiler_lines(data) == (b"UserWarning: a real one\nTraceback (most recent call last):\n"
                                         b"RuntimeError: boom\n\nUSDT: someone else's line\n")


def test_drops_a_cuda_builds_no_gpu_line_and_keeps_other_errors():
    no_gpu = b"ERROR:2026-11-26 19:57:26 3031:3031 DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 35"
    other = b"ERROR:2026-11-26 19:57:26 3031:3031 DeviceProperties.cpp:48] something else failed\n"
    assert drop_profiler_lines(no_gpu + b"\n" + other + START + b"\n") == other


def test_ranks_leave_out_the_profilers_cycle_warning_and_keep_others():
    import warnings

    from dpviz.engine.rank_stderr import CYCLE_WARNING, ignore_cycle_warning

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ignore_cycle_warning()
        warnings.warn(CYCLE_WARNING + ". Only events from the current cycle will be reported.", UserWarning)
        warnings.warn("a real one", UserWarning)
    assert [str(w.message) for w in seen] == ["a real one"]


def test_line_filter_is_the_same_whatever_the_chunks():
    data = START + b"\nreal line\n" + STOP + b"\nno newline at the end"
    out = []
    lines = LineFilter(out.append)
    for i in range(len(data)):
        lines.feed(data[i:i + 1])
    lines.close()
    assert b"".join(out) == b"real line\nno newline at the end"


def _python(code: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout_s, cwd=TESTS)


def test_the_profiler_does_print_usdt_lines_here():
    """The premise: without dpviz in between, kineto's lines do reach stderr (its
    profiler_start/stop records; a CUDA build without a GPU prints its device-count line)."""
    done = _python("import torch\nfrom torch.profiler import profile\n"
                   "with profile(): torch.ones(2).sum()")
    assert drop_profiler_lines(done.stderr.encode()) != done.stderr.encode(), done.stderr


def test_cli_run_prints_no_usdt_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "dpviz", "run", "--ranks", "4", "--steps", "3",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "params vs one process" in done.stdout
    assert "USDT" not in done.stdout + done.stderr and "profiler_st" not in done.stderr


CLUSTER_SCRIPT = """
import rank_tasks
from dpviz import Cluster, RankError
with Cluster(2) as cluster:
    print("results", cluster.run_task(rank_tasks.profile_and_warn, -1))
    try:
        cluster.run_task(rank_tasks.crash_loudly_on, 0)
    except RankError as err:
        print("caught rank", err.rank)
    cluster.run_task(rank_tasks.profile_and_warn, 1)
"""


def test_terminal_gets_real_errors_and_no_usdt_lines():
    done = _python(CLUSTER_SCRIPT)
    assert "results [0, 1]" in done.stdout and "caught rank 0" in done.stdout
    assert "USDT" not in done.stderr and "profiler_st" not in done.stderr
    for rank in (0, 1):
        assert f"rank {rank}: a real warning on fd 2\n" in done.stderr
    assert "Fatal Python error: rank 0 simulated a crash" in done.stderr   # a dying rank's words
    assert "rank 1: last words before the failure" in done.stderr
    assert "RuntimeError: deliberate failure on rank 1" in done.stderr      # the traceback
    assert done.returncode == 1


def test_notebook_cells_get_real_errors_and_no_usdt_lines():
    """Executed as nbval does: a kernel per notebook, outputs collected per cell."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in (
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\nimport rank_tasks\nfrom dpviz import Cluster\n"
        "cluster = Cluster(2)\ncluster.run_task(rank_tasks.profile_and_warn, -1)",
        "cluster.run_task(rank_tasks.profile_and_warn, 1)",
        "cluster.close()")])
    NotebookClient(nb, timeout=240, kernel_name="python3", allow_errors=True).execute()
    texts = [_cell_text(cell) for cell in nb.cells]
    assert not any("USDT" in t or "profiler_st" in t for t in texts), texts
    assert "rank 0: a real warning on fd 2" in texts[0] and "rank 1: a real warning on fd 2" in texts[0]
    assert "rank 1: last words before the failure" in texts[1]
    assert "deliberate failure on rank 1" in texts[1]


def _cell_text(cell) -> str:
    parts = []
    for out in cell.outputs:
        parts += [out.get("text", ""), out.get("evalue", ""), "\n".join(out.get("traceback", []))]
        parts += [str(v) for v in out.get("data", {}).values()]
    return "\n".join(parts)


def test_a_profiler_in_this_process_prints_no_usdt_lines_and_keeps_the_rest():
    """Issue 30: notebook 12's own torch.profiler printed red `USDT … profiler_start/stop` lines."""
    code = ("import os, sys, torch\n"
            "from torch.profiler import ProfilerActivity, profile\n"
            "from dpviz.engine.rank_stderr import quiet_profiler\n"
            "with quiet_profiler():\n"
            "    with profile(activities=[ProfilerActivity.CPU]):\n"
            "        torch.ones(4).sum()\n"
            "    os.write(2, b'a real warning\\n')\n"
            "print('done')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=TESTS.parent)
    assert done.returncode == 0, done.stderr
    assert "profiler_st" not in done.stderr and "a real warning" in done.stderr and done.stdout == "done\n"

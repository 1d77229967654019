"""The `%%ranks` magic (dpviz.lessons.cells) in a real IPython shell on live ranks: output per rank,
namespaces kept between cells, a failure naming the rank and its cell line, a hang stopped at
its timeout naming who waited in which collective, a recorded cell's timeline, bad input
refused before a rank starts, and nothing left running or listening afterwards."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import matplotlib
import pytest

matplotlib.use("Agg")

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import dpviz
from dpviz.engine import launch
from dpviz.lessons.cells.plots import plot_cell
from dpviz.lessons.cells.records import (
    CellError, CellRecord, CellTimeout, collective_timings, describe_cell,
)
from conftest import rank_processes
from listening import beyond_loopback, listening

ALL_REDUCE = "%%ranks\nt = torch.ones(3) * (rank + 1)\ndist.all_reduce(t)\nt.tolist()\n"


@pytest.fixture(scope="module")
def shell():
    """One IPython shell with the extension loaded and 2 warm ranks, stopped after."""
    sh = InteractiveShell.instance()
    sh.run_cell("%load_ext dpviz")
    assert sh.run_cell("%ranks 2").success
    yield sh
    sh.run_cell("%ranks stop")


def cell(shell, source: str, capsys) -> tuple[object, str]:
    """(the cell's ExecutionResult, what it printed)."""
    capsys.readouterr()
    result = shell.run_cell(source)
    return result, capsys.readouterr().out


def test_an_all_reduce_cell_prints_each_ranks_value_and_keeps_its_variables(shell, capsys):
    result, out = cell(shell, ALL_REDUCE, capsys)
    assert result.success, result.error_in_exec
    assert out.splitlines() == ["[0] [3.0, 3.0, 3.0]", "[1] [3.0, 3.0, 3.0]"]
    result, out = cell(shell, "%%ranks\nprint('rank', rank, 'of', world_size)\nt.sum().item()\n", capsys)
    assert out.splitlines() == ["[0] rank 0 of 2", "[0] 9.0", "[1] rank 1 of 2", "[1] 9.0"]


def test_rank_option_runs_the_cell_on_those_ranks_only(shell, capsys):
    result, out = cell(shell, "%%ranks --rank 1\nonly = rank\nonly\n", capsys)
    assert out.splitlines() == ["[1] 1"]
    result, out = cell(shell, "%%ranks\n'only' in dir()\n", capsys)
    assert out.splitlines() == ["[0] False", "[1] True"]


def test_an_error_names_the_rank_and_the_cells_failing_line(shell, capsys):
    source = "%%ranks\nx = rank\nif rank == 1:\n    raise ValueError('boom')\nx\n"
    result, out = cell(shell, source, capsys)
    err = result.error_in_exec
    assert isinstance(err, CellError) and err.ranks == [1]
    assert "cell line 3: raise ValueError('boom')" in str(err) and "ValueError: boom" in str(err)
    assert "dpviz" not in "\n".join(err._render_traceback_())   # the learner's frames only
    assert out.splitlines()[0] == "[0] 0"                        # rank 0 finished and showed its value
    assert "cell line 3: raise ValueError('boom')" in out       # IPython showed the rank's error
    result, out = cell(shell, "%%ranks\nx\n", capsys)            # the ranks are still warm
    assert out.splitlines() == ["[0] 0", "[1] 1"]


@pytest.mark.serial
def test_a_skipped_collective_ends_at_the_timeout_naming_the_waiting_rank(shell, capsys):
    pids = shell.magics_manager.registry["RanksMagics"].cells.cluster.pids()
    began = time.perf_counter()
    result, _ = cell(shell, "%%ranks --timeout 1.5\nt = torch.ones(2)\nif rank == 0:\n"
                            "    dist.all_reduce(t)\n", capsys)
    assert time.perf_counter() - began < 1.5 + 2.0
    err = result.error_in_exec
    assert isinstance(err, CellTimeout) and err.ranks == [0]
    assert "[0] waiting in all_reduce at cell line 3: dist.all_reduce(t)" in str(err)
    assert "[1] finished the cell" in str(err)
    assert not set(pids) & rank_processes()                     # the hung ranks are gone
    result, out = cell(shell, ALL_REDUCE, capsys)               # fresh ranks run the next cell
    assert result.success and out.splitlines() == ["[0] [3.0, 3.0, 3.0]", "[1] [3.0, 3.0, 3.0]"]


def test_a_timeout_says_which_rank_raised_before_the_collective(shell, capsys):
    result, _ = cell(shell, "%%ranks --timeout 1\nif rank == 1:\n    1 / 0\n"
                            "dist.barrier()\n", capsys)
    assert isinstance(result.error_in_exec, CellTimeout)
    assert "[0] waiting in barrier at cell line 3: dist.barrier()" in str(result.error_in_exec)
    assert "[1] raised ZeroDivisionError: division by zero at cell line 2: 1 / 0" in str(result.error_in_exec)


def test_a_timeout_names_the_wait_of_a_receive_no_rank_sends(shell, capsys):
    result, _ = cell(shell, "%%ranks --timeout 1 --rank 0\ngot = torch.empty(1)\n"
                            "pending = dist.irecv(got, src=1)\npending.wait()\n", capsys)
    assert isinstance(result.error_in_exec, CellTimeout)
    assert "[0] waiting in irecv (its wait) at cell line 3: pending.wait()" in str(result.error_in_exec)


def test_a_recorded_cell_keeps_a_record_whose_timeline_shows_the_all_reduce(shell, capsys, tmp_path):
    result, out = cell(shell, ALL_REDUCE.replace("%%ranks", "%%ranks --record"), capsys)
    assert result.success, result.error_in_exec
    record = shell.user_ns["_"]
    assert isinstance(record, CellRecord) and record.values == {0: "[3.0, 3.0, 3.0]", 1: "[3.0, 3.0, 3.0]"}
    reduces = [s for s in record.spans if s.op == "all_reduce"]
    assert {s.rank for s in reduces} == {0, 1} and {s.bytes for s in reduces} == {12}
    assert {s.rank for s in record.spans if s.kind == "compute"} == {0, 1}
    [timing] = collective_timings(record)
    assert timing.op == "all_reduce" and min(timing.wait_ms.values()) == 0.0
    assert "all_reduce 12 B: rank 0" in out and "Figure" in out   # described and drawn
    assert dpviz.load(dpviz.save(record, tmp_path / "cell.json")) == record
    ax = plot_cell(record)
    assert ax.collections and "all_reduce 12 B" in ax.get_title(loc="left")


def test_record_name_stores_the_record_in_the_users_namespace(shell, capsys):
    result, _ = cell(shell, "%%ranks --record broadcast_cell\nb = torch.arange(4.0) if rank == 0 "
                            "else torch.zeros(4)\ndist.broadcast(b, src=0)\n", capsys)
    record = shell.user_ns["broadcast_cell"]
    assert [t.op for t in collective_timings(record)] == ["broadcast"]
    assert "broadcast 16 B" in describe_cell(record)


def test_a_recorded_cell_without_torch_work_says_so_instead_of_drawing(shell, capsys):
    result, out = cell(shell, "%%ranks --record plain\nx = rank * 2\n", capsys)
    assert result.success and "ran no torch operation" in out and "Figure" not in out
    record = shell.user_ns["plain"]
    assert record.recorded and record.spans == ()
    with pytest.raises(ValueError, match="no torch operation"):
        plot_cell(record)


@pytest.mark.parametrize("line", ["%ranks 0", "%ranks -1", "%ranks two", "%ranks 999"])
def test_a_bad_rank_count_is_refused_before_a_rank_starts(line, monkeypatch):
    started = []
    monkeypatch.setattr(launch._Ranks, "__init__", lambda self, n, *a: started.append(n))
    sh = InteractiveShell.instance()
    sh.run_cell("%load_ext dpviz")
    assert isinstance(sh.run_cell(line).error_in_exec, UsageError)   # (UsageError: printed, not raised)
    assert started == []


@pytest.mark.parametrize("options, says", [
    ("--rank 2", "between 0 and 1"), ("--rank one", "rank numbers"), ("--rank 0,0", "twice"),
    ("--timeout 0", "positive"), ("--timeout inf", "positive"), ("--timeout soon", "number of seconds"),
    ("--record 1st", "Python name")])
def test_bad_cell_options_are_refused_before_the_cell_runs(shell, capsys, options, says):
    cells = shell.magics_manager.registry["RanksMagics"].cells
    starts = cells.cluster.starts
    result, out = cell(shell, f"%%ranks {options}\nprint('ran')\n", capsys)
    assert isinstance(result.error_in_exec, UsageError) and says in str(result.error_in_exec)
    assert "ran" not in out and cells.cluster.starts == starts


def test_a_syntax_error_is_raised_in_the_kernel(shell, capsys):
    result, _ = cell(shell, "%%ranks\nx = (\n", capsys)
    assert isinstance(result.error_in_exec, SyntaxError)


def test_loading_the_extension_imports_no_torch():
    code = ("import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
            "InteractiveShell.instance().run_cell('%load_ext dpviz')\nprint('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "False"


def test_stop_leaves_no_rank_running_and_nothing_listened_beyond_loopback(capsys):
    sh = InteractiveShell.instance()
    sh.run_cell("%load_ext dpviz")
    sh.run_cell("%ranks 2")
    assert len(rank_processes()) == 2
    assert beyond_loopback(listening(os.getpid())) == set()
    sh.run_cell("%ranks 3")                      # a resize replaces the ranks
    assert len(rank_processes()) == 3
    sh.run_cell("%ranks stop")
    assert rank_processes() == set()
    sh.run_cell("%ranks 2")
    sh.run_cell("%unload_ext dpviz")             # unloading the extension stops its ranks too
    assert rank_processes() == set()
    sh.run_cell("%load_ext dpviz")


def test_loading_the_extension_starts_the_forkserver_that_imports_torch_out_of_the_kernel():
    """`%load_ext dpviz` starts the forkserver the ranks fork from, so its torch import runs while
    the learner reads on; `%ranks 2` then forks its ranks from that same server."""
    code = ("import sys, time\nfrom multiprocessing import forkserver\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "sh = InteractiveShell.instance(); sh.run_cell('%load_ext dpviz')\n"
            "deadline = time.monotonic() + 60\n"
            "while not forkserver._forkserver._forkserver_pid and time.monotonic() < deadline:\n"
            "    time.sleep(0.01)\n"
            "server = forkserver._forkserver._forkserver_pid\nprint('torch?', 'torch' in sys.modules)\n"
            "assert sh.run_cell('%ranks 2').success\n"
            "print('same?', server == forkserver._forkserver._forkserver_pid)\nsh.run_cell('%ranks stop')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    said = dict(line.split() for line in out.stdout.splitlines() if line.endswith(("True", "False")))
    assert said == {"torch?": "False", "same?": "True"}   # the kernel had not imported torch

"""Resilience: many re-runs without growth, killed ranks, concurrent runs, Ctrl-C, bad files."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpviz import Cluster, RankError, RunConfig, run
from dpviz.core.record import RecordError, load, save, to_dict

from conftest import alive, rank_processes
import rank_tasks

SMALL = RunConfig(world_size=2, steps=2, layers=2, width=64)


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_fifty_reruns_grow_no_processes_files_or_memory():
    with Cluster(2) as cluster:
        for _ in range(10):  # warm-up: allocators, DDP, the profiler reach their steady state
            run(SMALL, cluster=cluster)
        procs, pids = rank_processes(), [os.getpid(), *cluster.pids()]
        fds, rss = {pid: _open_fds(pid) for pid in pids}, {pid: _rss_kb(pid) for pid in pids}
        for _ in range(50):
            record = run(SMALL, cluster=cluster)
        assert record.checks[-1].max_diff_across_ranks == 0.0
        assert rank_processes() == procs
        for pid, before in fds.items():   # the parent's and every rank's
            assert _open_fds(pid) <= before, f"process {pid} opened {_open_fds(pid) - before} more files"
        for pid, before in rss.items():
            assert _rss_kb(pid) <= 1.10 * before, f"process {pid} grew from {before} kB"


def test_rank_killed_mid_collective_is_named_quickly_and_nothing_is_left(tmp_path):
    before = rank_processes()
    pid_file = str(tmp_path / "pid")
    with Cluster(2, timeout_s=120) as cluster:
        pids = cluster.pids()

        def kill_rank0_when_waiting():
            deadline = time.monotonic() + 60
            while not os.path.exists(f"{pid_file}.0") and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # rank 0 is now blocked in the all-reduce
            os.kill(int(open(f"{pid_file}.0").read()), signal.SIGKILL)

        killer = threading.Thread(target=kill_rank0_when_waiting)
        killer.start()
        t0 = time.monotonic()
        with pytest.raises(RankError, match=r"rank 0: died .*exit code -9"):
            cluster.run_task(rank_tasks.report_pid_then_wait_in_collective, pid_file)
        killer.join()
        assert time.monotonic() - t0 < 60  # well before the 120 s timeout
        assert not any(alive(p) for p in pids)
    assert rank_processes() <= before


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a Jupyter kernel. A job started in the
    background by a non-interactive shell (as CI may be) inherits SIGINT *ignored*."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_keyboard_interrupt_stops_the_ranks(sigint_raises):
    before = rank_processes()
    with Cluster(2, timeout_s=120) as cluster:
        pids = cluster.pids()
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            cluster.run_task(rank_tasks.hang_in_collective_on, 1)
        timer.join()
        assert not any(alive(p) for p in pids)
        assert not cluster.alive
    assert rank_processes() <= before


def test_two_runs_at_once_on_one_machine(tmp_path):
    """Each run has its own store on its own free port: they do not see each other."""
    cmd = [sys.executable, "-m", "dpviz", "run", "--ranks", "2", "--steps", "2", "--width", "64"]
    runs = [subprocess.Popen([*cmd, "--out", str(tmp_path / name)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    for proc in runs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    for name in ("a", "b"):
        record = load(tmp_path / name / "record.json")
        assert record.world_size == 2 and record.checks[-1].max_diff_across_ranks == 0.0


# --- malformed records: a clear RecordError, never a raw traceback from deep inside -----------

def _valid_record_dict(tmp_path_factory=None) -> dict:
    from test_record import _tiny

    return to_dict(_tiny())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.lists(st.sampled_from(["spans", 0, "start_us", "config", "losses", "0", "kind",
                                      "world_size", "checks", "rank", "name"]), min_size=1, max_size=3),
       value=json_values)
def test_mutated_records_load_or_fail_clearly(tmp_path, path, value):
    data = _valid_record_dict()
    node = data
    for key in path[:-1]:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            break
    last = path[-1]
    if isinstance(node, dict):
        node[str(last)] = value
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value
    file = tmp_path / "mutated.json"
    file.write_text(json.dumps(data))
    try:
        load(file)
    except RecordError:
        pass  # the clear error we want; anything else fails the test


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=st.binary(max_size=200))
def test_random_bytes_fail_clearly(tmp_path, blob):
    file = tmp_path / "random.json"
    file.write_bytes(blob)
    with pytest.raises(RecordError):
        load(file)

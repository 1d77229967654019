"""torchrun entry point: the DDP workload on ranks torchrun starts (env:// rendezvous).

Tested with `dpviz torchrun` (torchrun with its store on loopback) on gloo, and two agents
as two nodes on this host; the multi-node NCCL command is not run here.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dpviz.analysis.scan import read_trace, spans_from_trace, trace_rank
from dpviz.core.config import RunConfig
from dpviz.core.record import RunRecord, load
from dpviz.engine.torchrun_entry import config_for, parse_args, rank_env
from dpviz.engine.workloads import reference_sgd_bound
from listening import beyond_loopback, listening


RANK_ARGS = ["--backend", "gloo", "--steps", "3"]   # what each torchrun rank is given, --out aside


def _torchrun(out, timeout_s: float = 240) -> tuple[subprocess.CompletedProcess, set]:
    """`dpviz torchrun` (torchrun on loopback) and every TCP socket its processes listened on,
    sampled every 50 ms while it ran."""
    cmd = [sys.executable, "-m", "dpviz", "torchrun", "--nproc-per-node", "2", "--",
           *RANK_ARGS, "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)   # its own group: a hang is killed whole
    seen, deadline = set(), time.monotonic() + timeout_s
    reader = ThreadPoolExecutor(1).submit(proc.communicate)
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= listening(proc.pid)
            time.sleep(0.05)
        stdout, stderr = reader.result(timeout=max(1.0, deadline - time.monotonic()))
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), seen


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun")
    done, sockets = _torchrun(out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done, sockets


@pytest.fixture(scope="module")
def torchrun_out(torchrun_run):
    out, done, _ = torchrun_run
    return out, done


def test_torchrun_listens_on_loopback_only(torchrun_run):
    _, _, sockets = torchrun_run
    stores = {s for s in sockets if s[1] == "127.0.0.1"}
    assert len({pid for pid, _, _ in stores}) >= 3   # the store's host and both ranks' gloo pairs
    assert beyond_loopback(sockets) == set(), sockets


# Not `numeric`: torchrun's ranks train RunConfig(model="mlp") at world size 2, the very config
# tests/test_workloads.py's numeric mlp check runs on every kernel path; a fresh torchrun per
# extra path (18 CPU-seconds each, measured per test) would repeat that arithmetic.
def test_ranks_end_with_equal_parameters(torchrun_out):
    out, done = torchrun_out
    record = load(out / "record.json", RunRecord)
    assert record.world_size == 2 and record.config["world_size"] == 2
    assert len(record.checks) == 3
    for check in record.checks:
        assert check.max_diff_across_ranks == 0.0  # every rank receives the same all-reduce
        assert check.max_diff_vs_single_process <= reference_sgd_bound(RunConfig.from_dict(record.config))
    assert "params across ranks, max |diff|: 0.0e+00 (exact by construction" in done.stdout
    assert "USDT" not in done.stderr and "profiler_st" not in done.stderr   # dropped by the ranks


def test_the_torchrun_config_is_the_one_checked_on_every_kernel_path():
    """Why the test above is not `numeric`: it trains what test_workloads' numeric mlp check does."""
    args = parse_args([*RANK_ARGS, "--out", "unused"])
    assert config_for(args, 2, 2) == RunConfig(model="mlp", world_size=2)


def test_per_rank_traces_parse(torchrun_out):
    out, _ = torchrun_out
    for rank in (0, 1):
        path = out / f"trace-rank{rank}.json"
        trace = read_trace(path)
        assert trace_rank(trace, path) == rank
        spans = spans_from_trace(trace, rank)
        assert sum(s.kind == "step" for s in spans) == 3
        assert any(s.kind == "allreduce" and s.name == "gloo:all_reduce" for s in spans)
    assert read_trace(out / "trace-merged.json")["traceEvents"]


def test_outside_torchrun_it_says_how_to_start(tmp_path):
    with pytest.raises(ValueError, match="start this module with torchrun"):
        rank_env({})
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run([sys.executable, "-m", "dpviz.engine.torchrun_entry", "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "torchrun" in done.stderr


def test_config_is_validated_per_node():
    args = parse_args(["--out", "x", "--backend", "gloo"])
    cfg = config_for(args, world_size=64, local_world_size=2)   # 64 ranks over many nodes: fine
    assert cfg.world_size == 64
    with pytest.raises(ValueError, match="CPU ranks"):
        config_for(args, world_size=64, local_world_size=64)     # 64 on this 2-core node: not


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """Two torchrun agents on this host as nodes 0 and 1 of a 2×2 job (c10d rendezvous on
    127.0.0.1): node rank, local rank and global rank differ for real."""
    from test_browser import _free_port

    out, port = tmp_path_factory.mktemp("two-nodes"), _free_port()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "dpviz-2x2",
         "--node-rank", str(node), "-m", "dpviz.engine.torchrun_entry", "--backend", "gloo",
         "--steps", "3", "--out", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        for node in (0, 1)]
    try:
        done = [a.communicate(timeout=300) for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
                a.communicate()
    for a, (_, err) in zip(agents, done):
        assert a.returncode == 0, err[-3000:]
    return out


def test_two_nodes_on_one_host_label_ranks_node_local(two_nodes, tmp_path):
    from dpviz.app.cli import main as cli
    from dpviz.analysis.trace_files import load_trace

    record = load(two_nodes / "record.json", RunRecord)
    labels = record.rank_labels
    assert record.world_size == 4 and sorted(labels) == [0, 1, 2, 3]
    where = {r: tuple(map(int, label.split(" ")[0].split(":"))) for r, label in labels.items()}
    assert sorted(where.values()) == [(0, 0), (0, 1), (1, 0), (1, 1)]      # 2 nodes × 2 local ranks
    assert {node for node, _ in where.values()} == {0, 1}
    assert any(rank != local for rank, (_, local) in where.items())      # global ≠ local for real
    assert all(c.max_diff_across_ranks == 0.0 for c in record.checks)
    # the four per-rank traces load back into one record, labelled the same
    loaded = load_trace(sorted(two_nodes.glob("trace-rank[0-9].json")))
    assert loaded.rank_labels == labels and loaded.world_size == 4
    assert cli(["report", str(two_nodes), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert all(label in page for label in labels.values())

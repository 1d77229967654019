"""torchrun entry point: the DDP workload on ranks torchrun starts (env:// rendezvous).

Tested with `torchrun --standalone` on gloo; the multi-node NCCL command is not run here.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from dpviz.config import RunConfig
from dpviz.record import RunRecord, load
from dpviz.rounding import reference_sgd_bound
from dpviz.torchrun_entry import config_for, parse_args, rank_env
from dpviz.trace import read_trace, spans_from_trace, trace_rank


def _torchrun(out, timeout_s: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "dpviz.torchrun_entry", "--backend", "gloo", "--steps", "3", "--out", str(out)]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)   # its own group: a hang is killed whole
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def torchrun_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun")
    done = _torchrun(out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


@pytest.mark.numeric
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
    done = subprocess.run([sys.executable, "-m", "dpviz.torchrun_entry", "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "torchrun" in done.stderr


def test_config_is_validated_per_node():
    args = parse_args(["--out", "x", "--backend", "gloo"])
    cfg = config_for(args, world_size=64, local_world_size=2)   # 64 ranks over many nodes: fine
    assert cfg.world_size == 64
    with pytest.raises(ValueError, match="CPU ranks"):
        config_for(args, world_size=64, local_world_size=64)     # 64 on this 2-core node: not

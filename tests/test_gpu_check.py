"""`make gpu-check` (scripts/gpu_check.py) run here, as CI runs it: without CUDA it runs the
CPU equivalents, and every row must pass. The GPU rows' judgement (`records.run_rows`) is
checked too, on this run's record given the spans a GPU trace adds."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dpviz.app.gpu_check.records import GpuCheck, run_rows
from dpviz.core.record import RunRecord, Span, load

ROOT = Path(__file__).resolve().parents[1]
CPU_ROWS = {"gloo ×2 on cpu: DDP = one process", "gloo ×2 on cpu: trace", "gloo ×2 on cpu: step anatomy",
            "load-trace", "report", "checkpointing peak (CPU allocator, profiler)",
            "cap slider (gloo, cpu, 2 ranks)"}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    proc = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    return proc, out


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the GPU checks")
def test_the_cpu_check_passes_every_row_and_writes_its_table(checked):
    proc, out = checked
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = GpuCheck.from_dict(json.loads((out / "gpu-check.json").read_text()))
    assert result.mode == "cpu" and result.environment["gpu_count"] == 0
    assert {r.name for r in result.rows} == CPU_ROWS
    assert all(r.passed for r in result.rows), result.table()
    assert (out / "gpu-check.txt").read_text() == result.table() + "\n"
    assert result.table() in proc.stdout


def _with_gpu_spans(record: RunRecord, names: list[str], world_size: int) -> RunRecord:
    """The record as an NCCL run's: a GPU compute kernel and kernels named `names`, on streams."""
    step = record.steps[-1]
    gpu = [Span(rank=0, tid="stream 7", name="sm90_xmma_gemm_f32f32", kind="backward",
                start_us=0.0, end_us=5.0, step=step)]
    gpu += [Span(rank=0, tid="stream 21", name=n, kind="allreduce", start_us=1.0, end_us=3.0, step=step)
            for n in names]
    return dataclasses.replace(record, config={**record.config, "backend": "nccl", "device": "cuda"},
                               world_size=world_size, spans=record.spans + tuple(gpu))


def test_gpu_traces_need_kernels_and_nccl_kernels_of_either_generation_where_nccl_has_peers(checked):
    _, out = checked
    record = load(out / "gloo" / "record.json", expect=RunRecord)
    trace_row = lambda names, world: run_rows("nccl", _with_gpu_spans(record, names, world), gpu=True)[1]
    for name in ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclKernel_AllReduce_RING_LL_Sum_float"):
        row = trace_row([name], 2)
        assert row.passed and row.figures["nccl_kernels"] == 1 and row.figures["gpu_spans"] == 2
    assert not trace_row([], 2).passed        # two NCCL ranks and no NCCL kernel: a failure
    assert trace_row([], 1).passed            # one NCCL rank all-reduces in place
    assert not run_rows("cpu", record, gpu=True)[1].passed   # no kernel at all

"""Every Kineto schema generation, PyTorch 1.8 to today, read as the GPU job it is: one small
job written in each generation's form (tests/kineto_generations.py) gives the same spans, the
same per-step rows, and HTA's own figures for it.

HTA's figures were computed once, in HTA's own venv (holistictraceanalysis 0.5.0, pandas
3.1.1), from the files `python tests/kineto_generations.py DIR` writes:
    /path/to/hta-venv/bin/python benchmarks/hta_reference.py DIR/*
(overlap %, idle %, compute %, non-compute %, window µs). HTA 0.5.0 cannot read the bare
event array of PyTorch 1.8's first form (TraceAnalysis: AttributeError: 'list' object has no
attribute 'items').
"""
from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from dpviz.analysis.overlap import (
    comm_compute_overlap, overlap_definition, summarize, temporal_breakdown,
)
from dpviz.analysis.trace_files import load_trace
from kineto_generations import GENERATIONS, write

# The same job in each form: HTA counts the kernel launched before the first step, leaves out
# the one whose launch is not in the trace and the last step's. Where the steps have GPU-side
# copies (PyTorch 1.10 on), the last one starts after the last CPU step does, and HTA takes
# the later start: it counts the last step's kernels launched before it. From PyTorch 2.3 on,
# µs carry decimals (HTA cuts events inward to whole µs) and a Stream Sync on stream 7 counts.
HTA = {"pytorch-1.8": (74.29, 15.56, 74.36, 10.09, 2340.0),
       "pytorch-1.9": (74.29, 15.56, 74.36, 10.09, 2340.0),
       "pytorch-1.10": (74.29, 15.36, 75.67, 8.97, 2630.0),
       "pytorch-1.11": (74.29, 15.36, 75.67, 8.97, 2630.0),
       "pytorch-1.12": (74.29, 15.36, 75.67, 8.97, 2630.0),
       "pytorch-2.0": (74.29, 15.56, 74.36, 10.09, 2340.0),
       "pytorch-2.4": (74.21, 15.75, 75.39, 8.86, 2629.0)}
POINTS = 0.1


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("generations")
    return {g.name: load_trace(write(g, tmp / g.name)) for g in GENERATIONS}


def _gpu_kinds(record, step: int) -> Counter:
    return Counter((s.kind, s.tid) for s in record.spans if s.step == step and s.tid.startswith("stream "))


@pytest.mark.parametrize("generation", [g.name for g in GENERATIONS])
def test_each_generation_reads_as_the_same_gpu_job(records, generation):
    """Kernels and copies by category and stream, whatever the generation calls them; each
    kernel's phase from the CPU op that launched it; the all-reduce on NCCL's stream."""
    record = records[generation]
    assert record.steps == [5, 6, 7]
    assert _gpu_kinds(record, 6) == {("memcpy", "stream 7"): 2, ("forward", "stream 7"): 1,
                                     ("backward", "stream 7"): 1, ("optimizer", "stream 7"): 1,
                                     ("allreduce", "stream 20"): 1}
    notes = "\n".join(record.notes)
    assert "GPU trace: communication kernels on stream 20, compute kernels on stream 7" in notes
    assert "19 of 20 GPU events (95%) linked to their CPU launch" in notes
    assert "CPU-only" not in notes
    reference = summarize(records["pytorch-2.0"])
    for row, same in zip(summarize(record), reference, strict=True):
        assert (row.step, row.comm_ms, row.compute_ms, row.overlapped_ms) == pytest.approx(
            (same.step, same.comm_ms, same.compute_ms, same.overlapped_ms), abs=1e-9)


@pytest.mark.parametrize("generation", sorted(HTA))
def test_each_generation_gets_htas_own_figures(records, generation):
    record = records[generation]
    overlap, idle, compute, non_compute, window = HTA[generation]
    (b,) = temporal_breakdown(record)
    assert b.definition == "HTA" and overlap_definition(record, 0) == "HTA"
    assert (b.idle_pct, b.compute_pct, b.non_compute_pct) == pytest.approx(
        (idle, compute, non_compute), abs=POINTS)
    assert b.window_ms * 1e3 == pytest.approx(window, abs=1.0)
    assert 100 * comm_compute_overlap(record, 0) == pytest.approx(overlap, abs=POINTS)


def test_pytorch_18s_bare_array_reads_as_its_object_form_and_says_hta_cannot(records):
    bare, obj = records["pytorch-1.8-dev"], records["pytorch-1.8"]
    assert bare.spans == obj.spans and temporal_breakdown(bare) == temporal_breakdown(obj)
    assert any("HTA 0.5.0 cannot read this file (a bare array of events" in n for n in bare.notes)
    assert not any("cannot read" in n for n in obj.notes)


def test_files_without_distributed_info_are_rank_0_with_a_note(records):
    """PyTorch 1.8-1.10 wrote no distributedInfo: one such file is rank 0, as HTA reads it."""
    for generation in ("pytorch-1.8", "pytorch-1.9", "pytorch-1.10"):
        record = records[generation]
        assert {s.rank for s in record.spans} == {0}
        assert "(from default: no distributedInfo, none given, none in its name; HTA defaults " \
               "to rank 0 too)" in record.notes[0]


def test_pytorch_18s_input_dims_give_a_gloo_collectives_size(tmp_path):
    """PyTorch 1.8 spelt the shapes arg "Input dims" (1.9 on: "Input Dims"), in the Operator
    category: a gloo all-reduce of 1,024 floats is 4 KiB either way."""
    def trace(dims: str, category: str) -> dict:
        op = {"ph": "X", "cat": category, "pid": 1, "tid": "1", "dur": 100}
        return {"schemaVersion": 1, "traceEvents": [
            op | {"name": "ProfilerStep#1", "ts": 0, "dur": 1000, "args": {}},
            op | {"name": "aten::mm", "ts": 100, "args": {dims: [[32, 32]], "Input type": ["float"]}},
            op | {"name": "gloo:all_reduce", "ts": 300, "tid": "2",
                  "args": {dims: [[1024]], "Input type": ["float"]}}]}
    sizes = []
    for dims, category in (("Input dims", "Operator"), ("Input Dims", "cpu_op")):
        path = tmp_path / f"{category}-rank0.json.gz"
        with gzip.open(path, "wt") as f:
            json.dump(trace(dims, category), f)
        record = load_trace(path)
        sizes.append([s.bytes for s in record.spans if s.kind == "allreduce"])
        (row,) = summarize(record)
        assert row.compute_ms == pytest.approx(0.1)   # the Operator counts as a CPU op
    assert sizes == [[4096], [4096]]

"""Trace events → typed spans, on real traces: dpviz's own gloo run and an A100 NCCL job.

tests/data/dpviz-gloo-2rank/rank-{0,1}.json.gz were recorded here with
`dpviz run --ranks 2 --steps 3 --bucket-cap-mb 0.25` (the default MLP: 4 blocks of
Linear(256, 256) + a Linear(256, 1) head). tests/data/a100-nccl-ddp-rank0.json.gz is rank 0
of a 2-rank DDP job on A100s (Meta's HTA test data, MIT licence beside it).
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from dpviz import run
from dpviz.analysis.scan import TraceScan, read_trace, short_kernel_name, spans_from_trace
from dpviz.core.record import Span

DATA = Path(__file__).parent / "data"
BLOCK_BYTES = (256 * 256 + 256) * 4     # one Linear(256, 256): weight + bias, float32
HEAD_BYTES = (256 + 1) * 4              # Linear(256, 1)


@pytest.fixture(scope="module")
def gloo_spans():
    return {r: spans_from_trace(read_trace(DATA / f"dpviz-gloo-2rank/rank-{r}.json.gz"), r)
            for r in (0, 1)}


@pytest.fixture(scope="module")
def a100_spans():
    return spans_from_trace(read_trace(DATA / "a100-nccl-ddp-rank0.json.gz"), 0)


def _allreduces(spans, step, kind="allreduce"):
    return sorted((s for s in spans if s.kind == kind and s.step == step), key=lambda s: s.start_us)


# --- dpviz's own gloo trace -----------------------------------------------------------------

def test_dpviz_trace_spans_have_every_kind_a_live_run_makes(gloo_spans):
    for rank, spans in gloo_spans.items():
        kinds = Counter(s.kind for s in spans)
        # 3 steps of 1 micro-step; 9 buckets = 1 (step 0) + 4 + 4; 2 gloo:broadcast of DDP's
        # buffers; optimizer = step + zero_grad per step; 26 autograd functions per backward
        assert kinds == {"step": 3, "micro_step": 3, "forward": 3, "backward": 78, "bucket_hook": 9,
                         "allreduce_launch": 9, "allreduce": 9, "optimizer": 6, "collective": 2}, rank
        assert all(s.rank == rank and s.step in (0, 1, 2) for s in spans)


def test_dpviz_trace_buckets_are_the_model_in_bucket_cap_pieces(gloo_spans):
    """Step 0: DDP's one initial bucket holds every gradient. After the rebuild, with a 0.25 MB
    cap each Linear block is a bucket of its own, and the head joins the first one."""
    for spans in gloo_spans.values():
        first = _allreduces(spans, 0)
        assert [(s.bucket, s.bytes) for s in first] == [(0, 4 * BLOCK_BYTES + HEAD_BYTES)]
        for step in (1, 2):
            done = _allreduces(spans, step)
            assert [(s.bucket, s.bytes) for s in done] == [
                (0, BLOCK_BYTES + HEAD_BYTES), (1, BLOCK_BYTES), (2, BLOCK_BYTES), (3, BLOCK_BYTES)]
            launches = _allreduces(spans, step, "allreduce_launch")
            assert [s.bytes for s in launches] == [s.bytes for s in done]
            # gloo runs the all-reduces on worker threads, never the main (launching) thread
            assert {s.tid for s in done}.isdisjoint({s.tid for s in launches})


def test_live_run_parses_into_the_same_kinds_as_the_stored_trace(cluster2, gloo_spans):
    """Guards the stored trace against drift: today's torch must still trace the same way."""
    record = run(cluster=cluster2, world_size=2, steps=3, bucket_cap_mb=0.25)
    for rank in (0, 1):
        live = Counter(s.kind for s in record.spans if s.rank == rank)
        assert live == Counter(s.kind for s in gloo_spans[rank])
        assert [len(_allreduces(record.spans_of(rank=rank), step)) for step in (0, 1, 2)] == [1, 4, 4]


# --- a GPU trace: NCCL kernels on their own stream ------------------------------------------

def test_nccl_kernels_are_the_communication_and_run_on_one_stream(a100_spans):
    kernels = [s for s in a100_spans if s.tid.startswith("stream ")]
    comm = {s.tid for s in kernels if s.kind in ("allreduce", "collective")}
    compute = {s.tid for s in kernels if s.kind in ("forward", "backward", "optimizer", "compute")}
    assert comm == {"stream 40"} and compute == {"stream 7"}
    assert {s.name for s in kernels if s.kind == "allreduce"} == {"ncclKernel_AllReduce_RING_LL_Sum_float"}
    # per ProfilerStep: 5 bucket all-reduces, 2 broadcasts (DDP syncs BatchNorm buffers in forward)
    per_step = Counter((s.step, s.kind) for s in kernels if s.tid == "stream 40")
    assert per_step == {(step, kind): n for step in (4, 5, 6)
                        for kind, n in (("allreduce", 5), ("collective", 2))}


def test_allreduce_sizes_are_ddp_buckets_of_resnet50(a100_spans):
    """`In msg nelems` × 4 bytes (Float). The five buckets add up to 25,557,032 floats:
    ResNet-50's parameter count; the first is its fc layer (2048 × 1000 + 1000)."""
    nelems = [2_049_000, 7_875_584, 6_563_840, 6_637_568, 2_431_040]
    for step in (4, 5, 6):
        done = _allreduces(a100_spans, step)
        assert [(s.bucket, s.bytes) for s in done] == [(i, 4 * n) for i, n in enumerate(nelems)]
        assert sum(nelems) == 25_557_032
        # the CPU launch got its size from the kernel it launched (linked by an ac2g flow)
        launches = _allreduces(a100_spans, step, "allreduce_launch")
        assert [s.bytes for s in launches] == [s.bytes for s in done]
        assert all(l.start_us < k.start_us for l, k in zip(launches, done))


def test_kernels_take_their_phase_from_the_cpu_op_that_launched_them(a100_spans):
    kinds = Counter(s.kind for s in a100_spans if s.tid == "stream 7")
    assert kinds["backward"] > kinds["forward"] > kinds["optimizer"] > 0
    for step in (4, 5, 6):
        fwd = [s for s in a100_spans if s.kind == "forward" and s.step == step]
        bwd = [s for s in a100_spans if s.kind == "backward" and s.step == step]
        opt = [s for s in a100_spans if s.kind == "optimizer" and s.step == step]
        # on the GPU too: forward kernels, then backward kernels, then the optimizer's
        assert max(s.end_us for s in fwd) <= min(s.start_us for s in bwd)
        assert max(s.end_us for s in bwd) <= min(s.start_us for s in opt)


def test_cpu_ops_only_classify_kernels_on_a_gpu_trace(a100_spans):
    cpu = Counter(s.kind for s in a100_spans if not s.tid.startswith("stream "))
    # c10d::allreduce_ and the nccl:all_reduce inside it are one launch, counted once
    assert cpu == {"step": 3, "allreduce_launch": 15}


def test_gloo_on_cuda_keeps_gloos_cpu_side_collectives_beside_the_kernels():
    """gloo on CUDA tensors (`RunConfig(device="cuda")`): the kernels compute, and the
    all-reduce is gloo's work on its own CPU thread, which a GPU trace must keep."""
    events = [dict(ph="X", cat="user_annotation", name="dpviz:step#0", pid=1, tid=1, ts=0, dur=100),
              dict(ph="X", cat="cpu_op", name="gloo:all_reduce", pid=1, tid=2, ts=40, dur=30,
                   args={"Input Dims": [[1024]], "Input type": ["float"]}),
              dict(ph="X", cat="kernel", name="sm90_gemm", pid=0, tid=7, ts=10, dur=50,
                   args={"stream": 7, "correlation": 5})]
    kinds = {(s.kind, s.tid, s.bytes) for s in spans_from_trace({"traceEvents": events}, 0)}
    assert kinds == {("step", "1", None), ("compute", "stream 7", None), ("allreduce", "2", 4096)}


# --- odd events -----------------------------------------------------------------------------

def _scan(events) -> TraceScan:
    scan = TraceScan()
    for ev in events:
        scan.add(ev)
    return scan


def test_unknown_categories_are_kept_as_other_and_junk_is_counted():
    scan = _scan([
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "mtia_kernel", "name": "new_thing", "ts": 10, "dur": 5, "tid": 3},
        {"ph": "X", "cat": "cpu_op", "name": "DistributedDataParallel.forward", "ts": "x"},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 1},   # a CPU trace's compute
        {"ph": "C", "name": "counter", "ts": 1},
        [1, 2], None,
    ])
    spans = scan.spans(rank=2)
    assert [(s.kind, s.name, s.step, s.rank) for s in spans] == [
        ("step", "ProfilerStep#7", 7, 2), ("compute", "CPU ops", 7, 2), ("other", "new_thing", 7, 2)]
    notes = " ".join(scan.notes(2))
    assert "'mtia_kernel'" in notes and "3 malformed" in notes and "'C'" in notes


def test_a_time_past_floats_range_is_malformed_not_an_error():
    """JSON integers have no bound: one too large for a float is skipped like an infinite
    time (the fuzz tests in test_load_trace.py draw such integers now and then)."""
    scan = _scan([{"ph": "X", "cat": "user_annotation", "name": "dpviz:step#0", "ts": 0, "dur": 100},
                  {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 10**400, "dur": 5},
                  {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 1, "dur": -10**400}])
    assert [s.kind for s in scan.spans(0)] == ["step"] and "2 malformed" in " ".join(scan.notes(0))


def test_scanned_spans_are_whole_spans():
    """TraceScan makes its spans without Span's `__init__` (`_span`, `_with`, for speed):
    each still has every field of the dataclass, in order, none left unset."""
    spans = _scan([
        {"ph": "X", "cat": "user_annotation", "name": "dpviz:step#0", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 10, "dur": 5, "tid": 3,
         "args": {"Input Dims": [[[8]]], "Input type": ["TensorList"]}},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 12, "dur": 5}]).spans(1)
    assert [(s.kind, s.rank, s.step, s.bucket, s.bytes) for s in spans] == [
        ("step", 1, 0, None, None), ("allreduce_launch", 1, 0, 0, 32), ("allreduce", 1, 0, 0, None)]
    for span in spans:
        fields = {f.name: getattr(span, f.name) for f in dataclasses.fields(Span)}
        assert list(vars(span)) == list(fields) and dataclasses.MISSING not in fields.values()
        assert span == Span(**fields)


def test_a_trace_without_step_annotations_is_one_step():
    scan = _scan([{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 5, "dur": 10}])
    spans = scan.spans(rank=0)
    assert {(s.kind, s.step) for s in spans} == {("step", 0), ("allreduce", 0)}
    assert "whole trace is step 0" in " ".join(scan.notes(0))


def test_dpviz_steps_win_over_profiler_steps():
    spans = _scan([
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "dpviz:step#0", "ts": 1, "dur": 98},
    ]).spans(0)
    assert [(s.name, s.step) for s in spans] == [("dpviz:step#0", 0)]


def test_a_gloo_allreduce_ends_by_the_end_of_the_micro_step_that_launched_it():
    """gloo records an all-reduce's end after it has woken DDP; a late record is capped."""
    def ann(name, ts, dur, tid=1):
        return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "tid": tid}
    spans = _scan([
        ann("dpviz:step#0", 0, 100), ann("dpviz:micro_step#0", 1, 60),
        ann("gloo:all_reduce", 10, 20, tid=2),    # done inside the micro-step: as recorded
        ann("gloo:all_reduce", 40, 50, tid=2),    # recorded as ending at 90, after backward returned
        ann("gloo:all_reduce", 70, 25, tid=2),    # launched outside any micro-step: as recorded
    ]).spans(0)
    ends = [(s.start_us, s.end_us) for s in spans if s.kind == "allreduce"]
    assert ends == [(10, 30), (40, 61), (70, 95)]


def test_gloo_allreduces_started_out_of_launch_order_take_their_bucket_from_their_size():
    """gloo's two worker threads can start bucket 1's all-reduce before bucket 0's: where sizes
    are recorded, each all-reduce is numbered by the launch of its size (launch order is DDP's
    bucket order); where a size is missing or the sizes disagree, start order stands."""
    def ann(name, ts, dur, tid=1, cat="user_annotation", **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}

    def launch(ts, numel):
        return ann("c10d::allreduce_", ts, 1, cat="cpu_op", **{"Input Dims": [[[numel]]],
                                                              "Input type": ["TensorList"]})

    def reduce(ts, numel, tid):
        shapes = {} if numel is None else {"Input Dims": [[numel]], "Input type": ["float"]}
        return ann("gloo:all_reduce", ts, 5, tid=tid, **shapes)

    def numbered(first, second):
        spans = _scan([ann("dpviz:step#0", 0, 100), ann("dpviz:micro_step#0", 1, 60),
                       launch(10, 250), launch(12, 100), reduce(14, second, 3), reduce(15, first, 2)]).spans(0)
        return [(s.kind, s.bucket, s.bytes) for s in sorted(spans, key=lambda s: s.start_us)
                if s.kind in ("allreduce_launch", "allreduce")]

    assert numbered(250, 100) == [("allreduce_launch", 0, 1000), ("allreduce_launch", 1, 400),
                                  ("allreduce", 1, 400), ("allreduce", 0, 1000)]
    assert [b for _, b, _ in numbered(250, None)][2:] == [0, 1]     # a size missing: start order
    assert [b for _, b, _ in numbered(250, 250)][2:] == [0, 1]     # sizes that do not match


def test_stored_gloo_allreduces_end_before_the_optimizer_starts(gloo_spans):
    for spans in gloo_spans.values():
        for step in (0, 1, 2):
            optimizer = min(s.start_us for s in spans if s.kind == "optimizer" and s.step == step)
            assert max(s.end_us for s in _allreduces(spans, step)) <= optimizer


def test_short_kernel_name_drops_only_the_parameter_list():
    assert short_kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, "
                             "ncclWork*)") == "ncclKernel_AllReduce_RING_LL_Sum_float"
    name = "void at::native::(anonymous namespace)::f<float>(int (*)(int), float*)"
    assert short_kernel_name(name) == "void at::native::(anonymous namespace)::f<float>"
    assert short_kernel_name("volta_sgemm_128x64_nn") == "volta_sgemm_128x64_nn"


# Kernel names as NCCL 2.x writes them (old `ncclKernel_*`, 2.19+ `ncclDevKernel_*`), with the
# `Collective name` arg PyTorch's profiler adds; gloo's annotations.
@pytest.mark.parametrize("name, collective, op", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", None, "all_reduce"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", None, "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", None,
     "reduce_scatter"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", None, "broadcast"),
    ("ncclDevKernel_Reduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", None, "reduce"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", None, "send_recv"),
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "all_to_all", "all_to_all"),
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "send", "send_recv"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "_allgather_base",
     "all_gather"),
    ("gloo:all_reduce", None, "all_reduce"), ("gloo:all_gather", None, "all_gather"),
    ("gloo:reduce_scatter", None, "reduce_scatter"), ("gloo:broadcast", None, "broadcast"),
    ("gloo:send", None, "send_recv"), ("gloo:recv", None, "send_recv"),
    ("gloo:all_to_all", None, "all_to_all"), ("gloo:barrier", None, "barrier"),
])
def test_every_collective_is_communication_with_its_op(name, collective, op):
    from dpviz.analysis.overlap import summarize_step
    from dpviz.analysis.scan import COMM_KINDS

    gpu = name.startswith("nccl")
    scan = TraceScan()
    scan.add({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 100, "tid": 1})
    args = {"stream": 20, "In msg nelems": 256, "dtype": "float",
            **({"Collective name": collective} if collective else {})}
    scan.add({"ph": "X", "cat": "kernel" if gpu else "user_annotation", "name": name, "ts": 10,
              "dur": 40, "tid": 20 if gpu else 2, "args": args if gpu else {}})
    (span,) = [s for s in scan.spans(0) if s.kind in COMM_KINDS]
    assert span.op == op and span.kind == ("allreduce" if op == "all_reduce" else "collective")
    if gpu:
        assert span.bytes == 256 * 4
    row = summarize_step(scan.spans(0), rank=0, step=3)
    assert row.comm_ms == 0.04 and row.comm_ms_by_op == {op: 0.04} and row.n_collectives == 1

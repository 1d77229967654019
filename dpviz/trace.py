"""PyTorch profiler chrome traces → typed spans on a common clock; merging ranks.

Parsed once, into `record.Span`s; everything downstream is a pure function of spans.
Classification goes by event name and category, the way the profiler writes them with
gloo on CPU (collectives as `gloo:*` annotations on gloo worker threads) and with NCCL on
GPU (collectives as `nccl*` kernels on their own stream).
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from pathlib import Path

from .record import RecordError, Span, read_json

# Annotations dpviz's own runs add (record_function names): steps, micro-steps, comm hook.
STEP_PREFIX = "dpviz:step#"
MICRO_PREFIX = "dpviz:micro_step#"
HOOK_PREFIX = "dpviz:bucket#"

DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4,
               "long int": 8, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
               "Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Byte": 1}


class TraceError(RecordError):
    """A trace file that is not a PyTorch profiler chrome trace."""


def read_trace(path: str | os.PathLike) -> dict:
    """Load a `.json` or `.json.gz` chrome trace, or fail saying what is wrong with it."""
    try:
        data = read_json(path)
    except RecordError as err:
        raise TraceError(str(err)) from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path} is not a profiler trace: no 'traceEvents' list")
    return data


def trace_rank(trace: dict, path: str | os.PathLike | None = None) -> int:
    """Rank from the trace's `distributedInfo`, else from a `rank<N>` in the file name."""
    info = trace.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    match = re.search(r"rank[-_]?(\d+)", Path(path).name) if path else None
    if match:
        return int(match.group(1))
    raise TraceError(f"{path or 'trace'} has no distributedInfo and no 'rank<N>' in its name: "
                     "pass the rank explicitly")


def classify(name: str, cat: str) -> str | None:
    """The span kind of one profiler event, or None for events dpviz does not draw."""
    if cat == "kernel":
        if name.startswith(("ncclKernel", "ncclDevKernel")):
            return "allreduce" if "AllReduce" in name else "collective"
        return "compute"
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "memcpy"
    if name.startswith((STEP_PREFIX, "ProfilerStep#")):
        return "step"
    if name.startswith(MICRO_PREFIX):
        return "micro_step"
    if name.startswith(HOOK_PREFIX):
        return "bucket_hook"
    if name == "DistributedDataParallel.forward":
        return "forward"
    if name.startswith("autograd::engine::evaluate_function: "):
        return "backward"
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return "optimizer"
    if name in ("c10d::allreduce_", "c10d::allreduce_coalesced_"):
        return "allreduce_launch"
    if name.startswith("gloo:"):
        return "allreduce" if name == "gloo:all_reduce" else "collective"
    return None


def event_bytes(args: dict) -> int | None:
    """Message size from an event's recorded shapes (gloo/c10d) or NCCL kernel args."""
    if "In msg nelems" in args:
        return int(args["In msg nelems"]) * DTYPE_BYTES.get(str(args.get("dtype")), 4)
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not dims or not types:
        return None
    first = dims[0]
    while first and isinstance(first[0], list):  # a TensorList: [[dims of tensor 0], ...]
        first = first[0]
    size = DTYPE_BYTES.get(types[0])
    if size is None and types[0] == "TensorList":
        size = 4
    if size is None or not all(isinstance(d, int) for d in first):
        return None
    return math.prod(first) * size


def spans_from_trace(trace: dict, rank: int) -> list[Span]:
    """Typed spans of one rank, on the trace's own clock (µs), with step and bucket filled in."""
    raw = []
    for ev in trace["traceEvents"]:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        try:
            name, start, dur = str(ev["name"]), float(ev["ts"]), float(ev.get("dur", 0))
        except (KeyError, TypeError, ValueError):
            continue  # a malformed event is skipped, not fatal
        kind = classify(name, str(ev.get("cat", "")))
        if kind is None:
            continue
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        raw.append(Span(rank=rank, tid=str(ev.get("tid", "")), name=name, kind=kind,
                        start_us=start, end_us=start + dur, bytes=event_bytes(args)))
    return _number_buckets(_assign_steps(raw))


def _assign_steps(spans: list[Span]) -> list[Span]:
    steps = sorted((s for s in spans if s.kind == "step"), key=lambda s: s.start_us)
    out = []
    for s in spans:
        index = s.step
        for i, window in enumerate(steps):
            if window.start_us <= s.start_us < window.end_us:
                index = i
                break
        out.append(_with(s, step=index))
    return out


def _number_buckets(spans: list[Span]) -> list[Span]:
    """DDP launches buckets in index order, and gloo starts them in launch order.

    Numbering restarts at each micro-step: a micro-step that syncs (the last one, or every
    one when no_sync is misplaced) all-reduces every bucket from index 0 again.
    """
    counters: dict[tuple, int] = defaultdict(int)
    out = []
    for s in sorted(spans, key=lambda s: s.start_us):
        if s.kind == "micro_step":
            counters.clear()
        if s.kind in ("allreduce_launch", "allreduce", "bucket_hook") and s.step is not None:
            key = (s.kind, s.step)
            index = int(s.name[len(HOOK_PREFIX):]) if s.kind == "bucket_hook" else counters[key]
            counters[key] += 1
            s = _with(s, bucket=index)
        out.append(s)
    return out


def _with(span: Span, **changes) -> Span:
    return Span(**{**span.__dict__, **changes})


def shift(spans: list[Span], origin_us: float) -> list[Span]:
    """Move spans so `origin_us` becomes 0 (all ranks share one clock: one origin for all)."""
    return [_with(s, start_us=s.start_us - origin_us, end_us=s.end_us - origin_us) for s in spans]


def merge_traces(traces: dict[int, dict]) -> dict:
    """One chrome trace with a process per rank, time-aligned (ranks share one clock)."""
    events = []
    for rank, trace in sorted(traces.items()):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                       "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for ev in trace["traceEvents"]:
            if isinstance(ev, dict) and ev.get("ph") != "M":
                events.append({**ev, "pid": rank})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_json(data: dict, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.write_text(json.dumps(data))
    return path

"""A rank's profile reduced, in memory, to the events a run record reads.

Why: a knob re-runs the ranks on every move, and writing each rank's full chrome trace
(thousands of events, ~1.4 MB for the bucket slider's 2 steps) only for the parent to read
and parse it again cost most of a move (benchmarks/knob_latency.py times the parts). The rank instead walks the
profiler's own events once, keeps the few hundred that `dpviz.analysis.scan.classify` draws (steps,
micro-steps, forward/backward/optimizer, bucket hooks, collectives, `c10d::` calls and the
clock mark), and sends them as plain tuples. The parent feeds them to `dpviz.analysis.scan`'s
TraceScan field by field, as their chrome trace would give them (without building its dicts),
so that stays the one parser. The full trace file is still written when a user asks for it
(`--out`), and for GPU and checkpointed runs, whose spans need every event.

No torch import at the top: the parent side runs without torch.
"""
from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Iterable

from dpviz.analysis.scan import CLOCK_MARK, COMM_KINDS, EventFields, TraceScan, classify
from dpviz.engine.torch_gate import input_shapes

# (name, category, start ns, duration ns, thread, input shapes, input dtypes)
Event = tuple[str, str, int, int, int, list, list]


@functools.lru_cache(maxsize=4096)   # a profile repeats a few hundred names, thousands of times
def _kept(name: str) -> bool | None:
    """Whether the record reads a CPU event's shapes (a collective's bytes), None where it
    reads no part of the event (not a span kind, a `c10d::` call or the clock mark)."""
    kind = classify(name, "cpu_op")
    if kind is None:
        return False if name.startswith("c10d::") or name == CLOCK_MARK else None
    return kind in COMM_KINDS or kind == "allreduce_launch"


# The two events of one bucket's all-reduce on CPU (the call, gloo's work) and the shapes and
# types the profiler gives them with `record_shapes` (trailing scalar arguments left out).
ALLREDUCE_SHAPES = {"c10d::allreduce_": lambda numel: ([[[numel]]], ["TensorList"]),
                    "gloo:all_reduce": lambda numel: ([[numel]], ["float"])}

def reduce_profile(events: Iterable, bucket_numels: list[int] | None = None) -> list[Event]:
    """Rank side: of a finished CPU profile's events (`torch_gate.kineto_events`), those the record reads.

    Times stay integer nanoseconds on the profiler's clock, which every rank on this machine
    shares; shapes (a TensorList's nested, as the chrome trace writes them) and dtypes are kept only
    where bytes are read: the collectives. A profile taken without shapes (`record_shapes=False`,
    `records_shapes`) whose only collectives are the buckets' float32 all-reduces gets
    them from `bucket_numels`, the sizes DDP handed over, in order: the k-th call and the k-th
    gloo work (in start order, as `dpviz.analysis.scan` numbers buckets) are the k-th bucket's. Where the
    counts differ, those events keep no shapes (their bytes unknown, as in any trace without).
    """
    out = []
    for ev in events:
        name = ev.name()
        comm = _kept(name)   # cached by name: most of a profile is events the record never reads
        if comm is None:
            continue
        out.append((name, "user_annotation" if ev.is_user_annotation() else "cpu_op",
                    ev.start_ns(), ev.duration_ns(), ev.start_thread_id(),
                    input_shapes(ev) if comm else [], ev.dtypes() if comm else []))
    return _with_bucket_shapes(out, bucket_numels) if bucket_numels is not None else out


def _with_bucket_shapes(events: list[Event], numels: list[int]) -> list[Event]:
    """`events` with each all-reduce's shapes from the k-th bucket's size (`reduce_profile`)."""
    for name, shapes_of in ALLREDUCE_SHAPES.items():
        mine = sorted((i for i, ev in enumerate(events) if ev[0] == name), key=lambda i: events[i][2])
        if len(mine) == len(numels):
            for i, numel in zip(mine, numels):
                events[i] = (*events[i][:5], *shapes_of(numel))
    return events


def first_start(events_by_rank: Iterable[list[Event]]) -> int:
    """The earliest start (ns) of any rank's events (0 if none): the common origin that keeps
    ranks aligned, and µs at full precision (`scan_events`)."""
    return min((ev[2] for evs in events_by_rank for ev in evs), default=0)


def scan_events(events: Iterable[Event], origin_ns: int) -> tuple[TraceScan, float | None]:
    """Parent side: one rank's events read by `dpviz.analysis.scan.TraceScan`, the one trace parser,
    field by field as their chrome trace would give them (µs from `origin_ns`, shapes and
    types as `args`), without building the trace's dicts. Also returns the middle of the
    clock mark on that clock (None without one), where the link thread's times go."""
    fields = [EventFields("X", cat, name, (start - origin_ns) / 1e3, dur / 1e3, tid, None,
                          {"Input Dims": shapes, "Input type": dtypes} if shapes else None)
              for name, cat, start, dur, tid, shapes, dtypes in events]
    scan = TraceScan()
    scan.add_batch(fields)
    mark = latest_mark((e.ts, e.dur) for e in fields if e.name == CLOCK_MARK)
    return scan, mark


# --- the rank's profiler, and what it hands back ------------------------------------------

def records_shapes(cfg, ddp, device: str, export_trace: bool, steady: bool = False) -> bool:
    """Does the profile starting now record input shapes (`record_shapes`)?

    The record reads shapes for one thing: the bytes of each collective. Where the profile is
    read reduced (`reads_events`) and its only collectives are the buckets' float32
    all-reduces, the hook's notes have their sizes (`reduce_profile` fills them in) and shapes
    would only cost time: a built-in model (a user's forward may run its own collectives),
    buckets already rebuilt (the rebuild broadcasts the bucket order) or steady from the start,
    and no buffers broadcast in each forward (the CNN's BatchNorm statistics). A chrome trace
    file (`profile_output`) keeps every shape."""
    import torch

    from dpviz.engine.torch_gate import has_rebuilt_buckets
    from dpviz.engine.workloads import BUILTIN

    sizes_from_hook = (not export_trace and reads_events(cfg, device) and cfg.model in BUILTIN
                       and (has_rebuilt_buckets(ddp) or steady)
                       and not (ddp.broadcast_buffers and ddp.modules_buffers)
                       and all(p.dtype == torch.float32 for p in ddp.parameters()))
    return not sizes_from_hook


def profiler(ctx, record_shapes: bool):
    """torch.profiler's profile of this rank's CPU (and GPU) activity."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device != "cpu" else [])
    return profile(activities=activities, record_shapes=record_shapes)


def reads_events(cfg, device: str) -> bool:
    """Are this run's spans read from its profile's events reduced on the rank, rather than
    from a chrome trace's every event (GPU, checkpointing, a torch that hides them)?"""
    from dpviz.engine.torch_gate import reads_profiler_events

    return device == "cpu" and not cfg.checkpoint_every and reads_profiler_events()


def profile_output(ctx, cfg, prof, device, export_trace: bool, log) -> tuple[str | None, list | None]:
    """(chrome trace path or None, the reduced events or None) of a finished profile; a
    profile without shapes gets its all-reduces' sizes from the hook's notes (`log`)."""
    from dpviz.engine.torch_gate import has_list_shapes, kineto_events

    if prof is None:
        return None, None
    events = None
    if reads_events(cfg, str(device)):
        # sizes from the hook's notes where the profile has none for a bucket's TensorList
        shapes = prof.record_shapes and has_list_shapes()
        numels = None if shapes else [n["numel"] for n in log.seen if n["step"] >= cfg.profile_from]
        everything = kineto_events(prof)
        events = reduce_profile(everything, numels)
        if not cfg.checks:   # freed once the reply is sent; with checks, before they gather
            ctx.free_after_reply(prof, everything)
    trace_path = None
    if export_trace or events is None:
        trace_path = str(Path(ctx.workdir) / f"trace-rank{ctx.rank}.json")
        prof.export_chrome_trace(trace_path)
    return trace_path, events


# A clock mark ties the clocks to within half its width (the time between its two perf_counter
# reads, ~5 µs median): 50 µs keeps the link thread's times within 25 µs of the trace's, well
# inside the ~1 ms between the last bucket's all-reduce and the end of its micro-step.
TIGHT_MARK_S = 50e-6
MARK_TRIES = 20


def latest_mark(marks: Iterable[tuple[float, float]]) -> float | None:
    """The middle of the latest of a trace's clock marks, given as (start, duration) pairs,
    None without one: `clock_mark` retries until a mark is narrow, and its time is the last's."""
    start, duration = max(marks, default=(None, 0.0))
    return None if start is None else start + duration / 2


def clock_mark(annotate) -> float:
    """perf_counter (s) at a `CLOCK_MARK` annotation: ties Python's clock to the trace's.

    The annotation lies somewhere between the two reads, so a thread preempted between them
    makes the pair wrong by up to half the gap; on a busy machine that can move the last bucket's
    link all-reduce past the end of its step. So the mark is retried until narrow; a trace's
    readers take its latest mark (`latest_mark`), this one."""
    for _ in range(MARK_TRIES):
        before = time.perf_counter()
        with annotate(CLOCK_MARK):
            after = time.perf_counter()
        if after - before <= TIGHT_MARK_S:
            break
    return (before + after) / 2

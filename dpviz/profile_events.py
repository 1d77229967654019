"""A rank's profile reduced, in memory, to the events a run record reads.

Why: a knob re-runs the ranks on every move, and writing each rank's full chrome trace
(thousands of events, ~1.4 MB for the bucket slider's 2 steps) only for the parent to read
and parse it again cost a quarter of a second per move. The rank instead walks the
profiler's own events once, keeps the few hundred that `dpviz.trace.classify` draws (steps,
micro-steps, forward/backward/optimizer, bucket hooks, collectives, `c10d::` calls and the
clock mark), and sends them as plain tuples. The parent feeds them to `dpviz.trace`'s
TraceScan field by field, as their chrome trace would give them (without building its dicts),
so that stays the one parser. The full trace file is still written when a user asks for it
(`--out`), and for GPU and checkpointed runs, whose spans need every event.

No torch import at the top: the parent side runs without torch.
"""
from __future__ import annotations

import functools
from typing import Iterable

from .torch_gate import input_shapes
from .trace import CLOCK_MARK, COMM_KINDS, TraceScan, classify

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

# The RecordFunction scopes of every event a record reads: operators, `c10d::` calls and
# autograd's `evaluate_function: …` (FUNCTION); annotations and gloo's work (USER_SCOPE).
READ_SCOPES = ("FUNCTION", "USER_SCOPE")


class ScopedProfile:
    """Rank side: torch's profiler on CPU, recording only the events of READ_SCOPES, for a
    run whose profile is reduced (`reduce_profile`) and written to no trace file.

    It makes the calls `torch.profiler.profile` makes (prepare, enable, disable: torch's
    kineto profiler, the same events and clock), but enables it for READ_SCOPES only, which
    torch's Python classes do not offer. What it leaves out are the autograd nodes' own events
    (BACKWARD_FUNCTION: `AddmmBackward0`, `torch::autograd::AccumulateGrad`, …; 126 of the
    bucket slider's 1613 events), which no span is made from: fewer events to record, to
    post-process when it stops, and to walk. It also skips what `torch.profiler.profile`
    adds for a trace file (its metadata), so it starts in half the time. The calls are
    torch's private ones (`torch._C._autograd`) as the pinned torch 2.13 has them; tests check
    its record against the same run's whole profile."""

    def __init__(self, record_shapes: bool):
        self.record_shapes = record_shapes
        self.results = None   # torch's `_ProfilerResult`, once stopped

    def start(self) -> None:
        from torch._C._autograd import _enable_profiler, _prepare_profiler
        from torch._C._profiler import (ProfilerActivity, ProfilerConfig, ProfilerState, RecordScope,
                                        _ExperimentalConfig)
        from torch.autograd.profiler import _run_on_profiler_start

        config = ProfilerConfig(ProfilerState.KINETO, self.record_shapes, False, False, False, False,
                                _ExperimentalConfig())
        _prepare_profiler(config, {ProfilerActivity.CPU})
        _run_on_profiler_start()
        _enable_profiler(config, {ProfilerActivity.CPU}, {getattr(RecordScope, s) for s in READ_SCOPES})

    def stop(self) -> None:
        from torch._C._autograd import _disable_profiler
        from torch.autograd.profiler import _run_on_profiler_stop

        self.results = _disable_profiler()
        _run_on_profiler_stop()


def kineto_events(prof) -> list:
    """The profiler's own events of a finished `ScopedProfile` or `torch.profiler.profile`."""
    results = prof.results if isinstance(prof, ScopedProfile) else prof.profiler.kineto_results
    return results.events()


def reduce_profile(events: Iterable, bucket_numels: list[int] | None = None) -> list[Event]:
    """Rank side: of a finished CPU profile's events (`kineto_events`), those the record reads.

    Times stay integer nanoseconds on the profiler's clock, which every rank on this machine
    shares; shapes (a TensorList's nested, as the chrome trace writes them) and dtypes are kept only
    where bytes are read: the collectives. A profile taken without shapes (`record_shapes=False`,
    `dpviz.ddp_run.needs_shapes`) whose only collectives are the buckets' float32 all-reduces gets
    them from `bucket_numels`, the sizes DDP handed over, in order: the k-th call and the k-th
    gloo work (in start order, as `dpviz.trace` numbers buckets) are the k-th bucket's. Where the
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
    """Parent side: one rank's events read by `dpviz.trace.TraceScan`, the one trace parser,
    field by field as their chrome trace would give them (µs from `origin_ns`, shapes and
    types as `args`), without building the trace's dicts. Also returns the middle of the
    clock mark on that clock (None without one), where the link thread's times go."""
    scan, mark = TraceScan(), None
    add = scan.add_fields
    for name, cat, start, dur, tid, shapes, dtypes in events:
        ts, dur_us = (start - origin_ns) / 1e3, dur / 1e3
        add("X", cat, name, ts, dur_us, tid, None,
            {"Input Dims": shapes, "Input type": dtypes} if shapes else None)
        if name == CLOCK_MARK:
            mark = ts + dur_us / 2
    return scan, mark

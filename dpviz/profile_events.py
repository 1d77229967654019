"""A rank's profile reduced, in memory, to the events a run record reads.

Why: a knob re-runs the ranks on every move, and writing each rank's full chrome trace
(thousands of events, ~1.4 MB for the bucket slider's 2 steps) only for the parent to read
and parse it again cost a quarter of a second per move. The rank instead walks the
profiler's own events once, keeps the few hundred that `dpviz.trace.classify` draws (steps,
micro-steps, forward/backward/optimizer, bucket hooks, collectives, `c10d::` calls and the
clock mark), and sends them as plain tuples. The parent feeds them to `dpviz.trace`'s
TraceScan field by field, as their chrome trace would give them, so it stays the one parser
(without the trace's dicts in between: ~0.5 ms of a move). The full trace file is still written when a
user asks for it (`--out`), and for GPU and checkpointed runs, whose spans need every event.

No torch import here: the rank passes its `torch.profiler.profile`, the parent gets plain tuples.
"""
from __future__ import annotations

import functools
from typing import Iterable

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


def reduce_profile(prof, bucket_numels: list[int] | None = None) -> list[Event]:
    """Rank side: the events of a finished CPU `torch.profiler.profile` the record reads.

    Times stay integer nanoseconds on the profiler's clock, which every rank on this machine
    shares; shapes (a TensorList's nested, as the chrome trace writes them) and dtypes are kept only
    where bytes are read: the collectives. A profile taken without shapes (`record_shapes=False`,
    `dpviz.ddp_run.needs_shapes`) whose only collectives are the buckets' float32 all-reduces gets
    them from `bucket_numels`, the sizes DDP handed over, in order: the k-th call and the k-th
    gloo work (in start order, as `dpviz.trace` numbers buckets) are the k-th bucket's. Where the
    counts differ, those events keep no shapes (their bytes unknown, as in any trace without).
    """
    out = []
    for ev in prof.profiler.kineto_results.events():
        name = ev.name()
        comm = _kept(name)   # cached by name: most of a profile is events the record never reads
        if comm is None:
            continue
        out.append((name, "user_annotation" if ev.is_user_annotation() else "cpu_op",
                    ev.start_ns(), ev.duration_ns(), ev.start_thread_id(),
                    ev.structured_input_shapes() if comm else [], ev.dtypes() if comm else []))
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

"""Pure functions on spans: step windows, overlap, exposed communication.

No torch here: these work the same on a live record and on a loaded trace.
Communication is every collective (all-reduce, all-gather, reduce-scatter, broadcast,
send/recv, all-to-all, barrier, ...): spans of a kind in COMM_KINDS, their `op` says which.

Two overlap figures, both per (rank, step) and both from the spans:
- overlap fraction (HTA's comm/comp overlap): |communication ∩ compute| / |communication|,
  compute = forward, backward, optimizer and other compute kernels/ops (memory copies are
  neither). The one figure to compare jobs and tools by.
- overlap with backward (DDP's question): |communication ∩ backward| / |communication|, how
  much of the gradient all-reduces DDP hid behind the backward pass that produced them.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from .record import RunRecord, Span
from .trace import COMM_KINDS

FACADE = ("describe", "summarize")  # what `dpviz.<name>` offers from here

COMPUTE_KINDS = ("forward", "backward", "recompute", "optimizer", "compute")


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping [start, end) intervals."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in union(intervals))


def intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total time covered by both interval sets."""
    a, b = union(a), union(b)
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def quartiles(values: list[float]) -> tuple[float, float]:
    """25th and 75th percentile: the spread figures draw around a median."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (0.0, 0.0)
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def _iv(spans: list[Span]) -> list[tuple[float, float]]:
    return [(s.start_us, s.end_us) for s in spans]


@dataclass(frozen=True)
class StepSummary:
    """One rank's step, in ms: what the figures, the CLI summary and summary.json report."""

    rank: int
    step: int
    step_ms: float
    backward_ms: float
    compute_ms: float         # wall time something computes
    comm_ms: float            # wall time some collective (or link transfer) is running
    overlapped_ms: float      # ... while backward computes
    exposed_comm_ms: float    # ... while nothing computes (what overlap could not hide)
    idle_ms: float            # nothing runs: no compute, no collective, no memory copy
    n_allreduces: int
    n_collectives: int        # every collective, all-reduces included
    comm_ms_by_op: dict[str, float]   # op → wall time some collective of that op runs

    @property
    def overlap_fraction(self) -> float:
        """HTA's comm/comp overlap: |communication ∩ compute| / |communication|."""
        return (self.comm_ms - self.exposed_comm_ms) / self.comm_ms if self.comm_ms else 0.0

    @property
    def backward_overlap_fraction(self) -> float:
        """DDP's: |communication ∩ backward| / |communication|."""
        return self.overlapped_ms / self.comm_ms if self.comm_ms else 0.0


def summarize_step(spans: list[Span], rank: int, step: int) -> StepSummary:
    """Step summary of one rank from its spans (any source: live run or loaded trace)."""
    mine = [s for s in spans if s.rank == rank and s.step == step]
    window = [s for s in mine if s.kind == "step"]
    collectives = [s for s in mine if s.kind in COMM_KINDS]
    # an emulated link's transfers (dpviz.link.records) are communication time too, not collectives
    comm = _iv(collectives + [s for s in mine if s.kind == "link"])
    backward = _iv([s for s in mine if s.kind in ("backward", "recompute")])
    compute = _iv([s for s in mine if s.kind in COMPUTE_KINDS])
    memory = _iv([s for s in mine if s.kind == "memcpy"])
    step_us = window[0].dur_us if window else length(_iv(mine))
    ops = sorted({s.op or s.kind for s in collectives})
    return StepSummary(
        rank=rank, step=step,
        step_ms=step_us / 1e3,
        backward_ms=length(backward) / 1e3,
        compute_ms=length(compute) / 1e3,
        comm_ms=length(comm) / 1e3,
        overlapped_ms=intersection(comm, backward) / 1e3,
        exposed_comm_ms=(length(comm) - intersection(comm, compute)) / 1e3,
        idle_ms=max(0.0, step_us - length(comm + compute + memory)) / 1e3,
        n_allreduces=sum(s.kind == "allreduce" for s in mine),
        n_collectives=len(collectives),
        comm_ms_by_op={op: length(_iv([s for s in collectives if (s.op or s.kind) == op])) / 1e3
                       for op in ops})


def summarize(record: RunRecord, steps: list[int] | None = None) -> list[StepSummary]:
    """Every (rank, step) summary; `steps` picks some (default: all)."""
    chosen = record.steps if steps is None else steps
    return [summarize_step(list(record.spans), r, s)
            for r in record_ranks(record) for s in chosen]


def record_ranks(record: RunRecord) -> list[int]:
    """Ranks with spans: a loaded trace may hold a few ranks of a larger job."""
    return sorted({s.rank for s in record.spans})


def steady_steps(record: RunRecord) -> list[int]:
    """Steps after the first: DDP rebuilds its buckets after iteration 0, so step 0 differs."""
    return record.steps[1:] or record.steps


def ddp_overlap_fraction(record: RunRecord, rank: int = 0) -> float | None:
    """DDP's own figure (from its logging data): overlap time ÷ backward comm time."""
    data = record.ddp_logging.get(rank, {})
    comm, overlap = data.get("avg_backward_comm_time"), data.get("avg_backward_compute_comm_overlap_time")
    return overlap / comm if comm else None


def ddp_style_overlap(record: RunRecord, rank: int = 0) -> float | None:
    """DDP's own overlap figure recomputed from the spans: the cross-check of both.

    DDP's timers differ from `overlap_fraction`: they start at the first bucket's launch and
    count overlap up to the end of backward, against communication up to the last bucket's
    end, each summed over the iterations it logged. It logs an iteration at the next
    forward, so never the last step. None when no step has buckets (e.g. a loaded trace).
    """
    overlap = comm = 0.0
    for step in record.steps[:-1]:
        mine = record.spans_of(rank=rank, step=step)
        launches = [s.start_us for s in mine if s.kind == "bucket_hook"]
        ends = [s.end_us for s in mine if s.kind == "allreduce"]
        backward = [s.end_us for s in mine if s.kind == "backward"]
        if launches and ends and backward:
            overlap += max(0.0, max(backward) - min(launches))
            comm += max(ends) - min(launches)
    return overlap / comm if comm else None


def describe(record: RunRecord) -> str:
    """A few lines for the CLI and notebooks: step time, communication, overlap."""
    rows = summarize(record, steady_steps(record))
    if not rows:
        return "no profiled steps in this record"
    mean = lambda xs: sum(xs) / len(xs)
    ddp = ddp_overlap_fraction(record)
    ranks = record_ranks(record)
    shown = (f"{record.world_size} ranks" if len(ranks) == record.world_size
             else f"ranks {ranks} of {record.world_size}")
    lines = [
        f"{shown}, {len(record.steps)} steps (steady steps: {steady_steps(record)})",
        f"step time        {mean([r.step_ms for r in rows]):8.2f} ms",
        f"communication    {mean([r.comm_ms for r in rows]):8.2f} ms "
        f"({mean([r.n_collectives for r in rows]):.0f} collectives/step: {_by_op(rows)}), "
        f"exposed {mean([r.exposed_comm_ms for r in rows]):.2f} ms",
        f"overlap fraction {mean([r.overlap_fraction for r in rows]):8.2f} (communication under "
        "any compute, as HTA defines it)",
        f"  with backward  {mean([r.backward_overlap_fraction for r in rows]):8.2f} (from spans; "
        f"DDP's own figure: {'n/a' if ddp is None else f'{ddp:.2f}'}{_recomputed(record)})",
    ]
    if record.checks:   # a loaded trace has no checks: only a live run can compare parameters
        lines += describe_checks(record)
    return "\n".join(lines)


def _by_op(rows: list[StepSummary]) -> str:
    """'all_reduce 3.10 ms, broadcast 0.20 ms' (means per step), or 'none'."""
    ops = sorted({op for r in rows for op in r.comm_ms_by_op})
    return ", ".join(f"{op} {sum(r.comm_ms_by_op.get(op, 0.0) for r in rows) / len(rows):.2f} ms"
                     for op in ops) or "none"


def describe_checks(record: RunRecord) -> list[str]:
    """The two parameter checks, each saying what kind of equality it is: across ranks exact
    by construction; against one process float32 rounding, next to the bound it must obey."""
    from .rounding import describe_difference

    last = record.checks[-1]
    worst = max(c.max_diff_across_ranks for c in record.checks)
    single = max(c.max_diff_vs_single_process for c in record.checks)
    return [f"params across ranks, max |diff|: "
            f"{describe_difference(worst, exact_because='every rank receives the same all-reduce result')}",
            f"params vs one process ({last.reference}), max |diff|: "
            f"{describe_difference(single, last.rounding_bound)}"]


def _recomputed(record: RunRecord) -> str:
    same = ddp_style_overlap(record)
    return "" if same is None else f", by DDP's definition from spans: {same:.2f}"


# --- whole-trace figures, as Holistic Trace Analysis (HTA) defines them --------------------

BUSY_KINDS = (*COMPUTE_KINDS, *COMM_KINDS, "memcpy")   # what keeps a GPU (or CPU rank) busy


def analysed_steps(record: RunRecord) -> list[int]:
    """The steps HTA analyses: every one but the last, when there are two or more (the
    profiler may stop inside the last one, so HTA drops the kernels launched in it)."""
    return record.steps[:-1] if len(record.steps) >= 2 else record.steps


def _analysed(record: RunRecord, rank: int) -> list[Span]:
    """The rank's busy spans in the analysed steps (a GPU kernel's step is its launch's),
    each cut inward to whole µs of the trace's own clock as HTA does (it rounds a
    ns-resolution event's start up and its end down, pytorch/pytorch#122425: otherwise
    back-to-back kernels overlap by a few ns); a record that does not know its clock's
    origin (`config["clock_origin_us"]`) is rounded on its own clock."""
    steps = set(analysed_steps(record))
    origin = record.config.get("clock_origin_us", 0.0)
    out = []
    for s in record.spans:
        if s.rank == rank and s.kind in BUSY_KINDS and (s.step in steps or not steps):
            start = math.ceil(s.start_us + origin) - origin
            out.append(replace(s, start_us=start,
                               end_us=max(start, math.floor(s.end_us + origin) - origin)))
    return out


def comm_compute_overlap(record: RunRecord, rank: int) -> float | None:
    """HTA's `get_comm_comp_overlap` for one rank, as a fraction: |comm ∩ compute| / |comm|
    over the analysed steps (None without communication)."""
    mine = _analysed(record, rank)
    comm = _iv([s for s in mine if s.kind in COMM_KINDS])
    compute = _iv([s for s in mine if s.kind in COMPUTE_KINDS])
    total = length(comm)
    return intersection(comm, compute) / total if total else None


@dataclass(frozen=True)
class Breakdown:
    """HTA's temporal breakdown of one rank: over the window from the first to the last
    busy span (GPU traces: first to last GPU kernel or memory copy; CPU traces: the same
    over the rank's compute and communication spans), the share of it idle (nothing runs),
    computing, and busy with no compute (communication, memory copies)."""

    rank: int
    window_ms: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float


def temporal_breakdown(record: RunRecord) -> list[Breakdown]:
    """HTA's `get_temporal_breakdown`, per rank, over the analysed steps."""
    out = []
    for rank in record_ranks(record):
        mine = _analysed(record, rank)
        if not mine:
            continue
        window = max(s.end_us for s in mine) - min(s.start_us for s in mine)
        busy = length(_iv(mine))
        compute = length(_iv([s for s in mine if s.kind in COMPUTE_KINDS]))
        pct = lambda us: round(100 * us / window, 2) if window else 0.0
        out.append(Breakdown(rank=rank, window_ms=window / 1e3, idle_pct=pct(window - busy),
                             compute_pct=pct(compute), non_compute_pct=pct(busy - compute)))
    return out

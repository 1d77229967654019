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

import bisect
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from dpviz.analysis.hta import HtaFigures
from dpviz.analysis.scan import COMM_KINDS, CPU_OPS, PROFILER_STEP, STEP_PREFIX, collector_paused
from dpviz.core.record import RunRecord, Span

FACADE = ("describe", "summarize")  # what `dpviz.<name>` offers from here

COMPUTE_KINDS = ("forward", "backward", "recompute", "optimizer", "compute")


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping [start, end) intervals."""
    merged: list[tuple[float, float]] = []
    lo = hi = None
    for start, end in sorted(intervals):
        if hi is not None and start <= hi:
            if end > hi:
                hi = end
        else:
            if hi is not None:
                merged.append((lo, hi))
            lo, hi = start, end
    if hi is not None:
        merged.append((lo, hi))
    return merged


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in union(intervals))


def intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total time covered by both interval sets."""
    a, b = union(a), union(b)
    total, i, j, na, nb = 0.0, 0, 0, len(a), len(b)
    while i < na and j < nb:
        (a0, a1), (b0, b1) = a[i], b[j]
        lo = a0 if a0 > b0 else b0
        hi = a1 if a1 < b1 else b1
        if hi > lo:
            total += hi - lo
        if a1 < b1:
            i += 1
        else:
            j += 1
    return total


def minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Parts of intervals `a` not covered by `b` (both merged first)."""
    out, cover = [], union(b)
    for start, end in union(a):
        for lo, hi in cover:
            if hi <= start or lo >= end:
                continue
            if lo > start:
                out.append((start, lo))
            start = max(start, hi)
        if start < end:
            out.append((start, end))
    return out


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
    n_by_op: dict[str, int] = field(default_factory=dict)   # op → collectives launched in the step
    link_ms: float = 0.0      # wall time some emulated-link transfer runs (part of comm_ms)
    n_links: int = 0          # emulated-link transfers launched in the step (one per bucket)

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
    mine = [s for s in spans if s.rank == rank]
    windows = step_windows(mine)
    if step not in windows:
        raise ValueError(f"rank {rank} has no step {step}")
    return _summary(rank, step, windows[step], _in_windows(mine, windows)[step],
                    [s for s in mine if s.step == step])


@collector_paused()
def summarize(record: RunRecord, steps: list[int] | None = None) -> list[StepSummary]:
    """Every (rank, step) summary; `steps` picks some (default: all). Linear in spans."""
    chosen = record.steps if steps is None else steps
    by_rank: dict[int, list[Span]] = defaultdict(list)
    for s in record.spans:
        by_rank[s.rank].append(s)
    out = []
    for rank in record_ranks(record):
        windows = step_windows(by_rank[rank])
        clipped = _in_windows(by_rank[rank], windows)
        launched: dict[int, list[Span]] = defaultdict(list)
        for s in by_rank[rank]:
            launched[s.step].append(s)
        out += [_summary(rank, step, windows[step], clipped[step], launched[step])
                for step in chosen if step in windows]
    return out


def on_gpu(spans) -> bool:
    """Whether these spans come from a GPU trace (kernels run on streams)."""
    return any(s.tid.startswith("stream ") for s in spans)


def step_windows(spans: list[Span]) -> dict[int, tuple[float, float]]:
    """step → (start, end) µs of one rank's step on the timeline where its work runs.

    CPU ranks: the step's annotation. GPU ranks: from the first GPU event launched in the
    step to the first launched in the next (the last step: to the end of its last GPU
    event), so a step's kernels are timed where the GPU runs them and consecutive windows
    never overlap: compute, communication and idle fit inside the window. A step with no GPU
    event keeps its annotation's window.
    """
    windows = {s.step: (s.start_us, s.end_us) for s in spans if s.kind == "step" and s.step is not None}
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for s in spans:
        step = s.step
        if step is not None and s.tid.startswith("stream "):
            if s.start_us < first.get(step, math.inf):
                first[step] = s.start_us
            if s.end_us > last.get(step, -math.inf):
                last[step] = s.end_us
    starts = sorted((t, k) for k, t in first.items())
    for (start, step), after in zip(starts, [*starts[1:], None]):
        windows[step] = (start, after[0] if after is not None else last[step])
    return windows


class _Cut(NamedTuple):
    """A span cut to a window: what the interval maths reads, without copying the span."""

    start_us: float
    end_us: float
    kind: str
    op: str | None


def _in_windows(spans: list[Span], windows: dict[int, tuple[float, float]]
                ) -> dict[int, list[_Cut]]:
    """step → the spans overlapping its window, cut to it (bisect: linear in spans). Spans
    of no step (a GPU event launched before profiling started) count in none."""
    order = sorted(windows.items(), key=lambda kv: kv[1])
    starts = [w[0] for _, w in order]
    out: dict[int, list[_Cut]] = {step: [] for step in windows}
    n = len(order)
    for s in spans:
        if s.step is None or s.kind == "step":
            continue
        start, end = s.start_us, s.end_us
        reach = end if end > start + 1e-9 else start + 1e-9   # a 0-µs span reaches past its start
        i = bisect.bisect_right(starts, start) - 1
        i = i if i > 0 else 0
        while i < n and starts[i] < reach:
            step, (a, b) = order[i]
            lo = a if a > start else start
            hi = b if b < end else end
            if hi > lo or (start == end and a <= start < b):
                out[step].append(_Cut(lo, hi if hi > lo else lo, s.kind, s.op))
            i += 1
    return out


def _summary(rank: int, step: int, window: tuple[float, float], mine: list[_Cut],
             launched: list[Span]) -> StepSummary:
    """One rank's step from the spans cut to its window (`mine`) and those launched in it."""
    collectives = [s for s in mine if s.kind in COMM_KINDS]
    # an emulated link's transfers (dpviz.core.link) are communication time too, not collectives
    links = [s for s in mine if s.kind == "link"]
    comm = _iv(collectives + links)
    backward = _iv([s for s in mine if s.kind in ("backward", "recompute")])
    compute = _iv([s for s in mine if s.kind in COMPUTE_KINDS])
    memory = _iv([s for s in mine if s.kind == "memcpy"])
    step_us = window[1] - window[0]
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
        n_allreduces=sum(s.kind == "allreduce" for s in launched),
        n_collectives=sum(s.kind in COMM_KINDS for s in launched),
        comm_ms_by_op={op: length(_iv([s for s in collectives if (s.op or s.kind) == op])) / 1e3
                       for op in ops},
        n_by_op=dict(Counter(s.op or s.kind for s in launched if s.kind in COMM_KINDS)),
        link_ms=length(_iv(links)) / 1e3, n_links=sum(s.kind == "link" for s in launched))


def record_ranks(record: RunRecord) -> list[int]:
    """Ranks with spans: a loaded trace may hold a few ranks of a larger job."""
    return sorted({s.rank for s in record.spans})


@dataclass(frozen=True)
class AnalysedSteps:
    """The steps every per-step figure averages, and each left-out step with the reason.

    `str()` is the line to print beside those figures, e.g. "analysed steps 4-5 (6 dropped:
    the last ProfilerStep may be cut short)". `caveats` name what a kept step still holds
    when too few steps were recorded to leave it out.
    """

    steps: tuple[int, ...]
    dropped: tuple[tuple[int, str], ...] = ()
    caveats: tuple[str, ...] = ()

    def __str__(self) -> str:
        why = "; ".join(f"{step} dropped: {reason}" for step, reason in self.dropped)
        line = f"analysed steps {_step_list(self.steps)}" + (f" ({why})" if why else "")
        return "; ".join([line, *self.caveats])


def analysed_steps(record: RunRecord) -> AnalysedSteps:
    """The one rule for which steps per-step figures (CLI headlines, summary.json, reports,
    notebooks, HTA-style figures) cover, so one-time work is never reported as per-step cost.

    In order, while at least one step is left:
    1. A last step that is a profiler step (`ProfilerStep#N`) is dropped: the profiler may
       stop inside it, so it can be cut short (HTA drops it too). dpviz's own step
       annotations close when the step ends, so a live run keeps its last step.
    2. Leading steps that are not steady are dropped: dpviz's own step 0 (DDP's first
       iteration, run with the buckets built in parameter order before DDP rebuilds them),
       and every leading step whose collectives (count per op, all ranks) differ from the
       last kept step's, e.g. step 1 of a live run, which holds the broadcasts of DDP's
       bucket rebuild. The first step that matches ends the drop.
    When only one step is left and it is dpviz's own step 0 or 1, it is kept with a caveat.
    """
    steps = record.steps
    if not steps:
        return AnalysedSteps(steps=())
    names = {s.step: s.name for s in record.spans if s.kind == "step"}
    dropped: list[tuple[int, str]] = []
    if len(steps) >= 2 and names.get(steps[-1], "").startswith(PROFILER_STEP):
        dropped.append((steps[-1], "the last ProfilerStep may be cut short (HTA drops it too)"))
        steps = steps[:-1]
    counts = _collective_counts(record)
    reference = counts.get(steps[-1], Counter())
    while len(steps) >= 2:
        reason = _not_steady(steps[0], names.get(steps[0], ""), counts.get(steps[0], Counter()),
                             reference, steps[-1])
        if reason is None:
            break
        dropped.append((steps[0], reason))
        steps = steps[1:]
    caveats = tuple(f"step {s} is DDP's {what} (record more steps to leave it out)"
                    for s, what in ((0, "first iteration"), (1, "bucket rebuild, if DDP rebuilt"))
                    if steps == [s] and names.get(s, "").startswith(STEP_PREFIX))
    return AnalysedSteps(steps=tuple(steps), dropped=tuple(sorted(dropped)), caveats=caveats)


def _not_steady(step: int, name: str, mine: Counter, reference: Counter, ref_step: int) -> str | None:
    """Why a leading step is not a steady one, or None if it is."""
    if name == f"{STEP_PREFIX}0":
        return "DDP's first iteration (buckets in parameter order, before DDP rebuilds them)"
    if mine == reference:
        return None
    more = ", ".join(f"{mine[op] - reference[op]} more {op}" for op in sorted(mine)
                     if mine[op] > reference[op])
    fewer = ", ".join(f"{reference[op] - mine[op]} fewer {op}" for op in sorted(reference)
                      if mine[op] < reference[op])
    return (f"one-time work: {', '.join(x for x in (more, fewer) if x)} than step {ref_step}"
            + (" (DDP's bucket-rebuild broadcasts)" if name == f"{STEP_PREFIX}1" and
               mine["broadcast"] > reference["broadcast"] else ""))


def _collective_counts(record: RunRecord) -> dict[int, Counter]:
    """step → collectives run in it, per op, summed over ranks."""
    counts: dict[int, Counter] = defaultdict(Counter)
    for s in record.spans:
        if s.kind in COMM_KINDS and s.step is not None:
            counts[s.step][s.op or s.kind] += 1
    return counts


def _step_list(steps: tuple[int, ...]) -> str:
    """(2, 3, 4, 7) → '2-4, 7'; () → 'none'."""
    runs: list[list[int]] = []
    for s in steps:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "none"


def steady_steps(record: RunRecord) -> list[int]:
    """`analysed_steps(record).steps` as a list, for callers that need only the numbers."""
    return list(analysed_steps(record).steps)


def ddp_overlap_fraction(record: RunRecord, rank: int = 0) -> float | None:
    """DDP's own figure (from its logging data): overlap time ÷ backward comm time."""
    data = record.ddp_logging.get(rank, {})
    comm, overlap = data.get("avg_backward_comm_time"), data.get("avg_backward_compute_comm_overlap_time")
    return overlap / comm if comm else None


def first_handover_wait_ms(record: RunRecord, rank: int = 0) -> float | None:
    """How long, on average over the analysed steps, a step's first communication started
    after DDP handed over its first bucket: DDP's timers count that wait as overlap (they
    start at the hand-over), the spans' figures do not (they count communication running).
    None without bucket hand-overs (a loaded trace) or communication."""
    waits = []
    for step in steady_steps(record):
        mine = record.spans_of(rank=rank, step=step)
        launches = [s.start_us for s in mine if s.kind == "bucket_hook"]
        comm = [s.start_us for s in mine if s.kind in COMM_KINDS or s.kind == "link"]
        if launches and comm:
            waits.append(max(0.0, min(comm) - min(launches)) / 1e3)
    return sum(waits) / len(waits) if waits else None


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
    analysed = analysed_steps(record)
    rows = summarize(record, list(analysed.steps))
    if not rows:
        return "no profiled steps in this record"
    mean = lambda xs: sum(xs) / len(xs)
    talking = [r for r in rows if r.comm_ms]   # an overlap is a share of communication: none, n/a
    ddp = ddp_overlap_fraction(record)
    ranks = record_ranks(record)
    shown = (f"{record.world_size} ranks" if len(ranks) == record.world_size
             else f"ranks {ranks} of {record.world_size}")
    lines = [
        f"{shown}, {len(record.steps)} steps; {analysed}",
        f"step time        {mean([r.step_ms for r in rows]):8.2f} ms"
        + (" (on the GPU: from a step's first kernel to the next step's)" if on_gpu(record.spans) else ""),
        f"communication    {mean([r.comm_ms for r in rows]):8.2f} ms ({_link_part(rows)}"
        f"{mean([r.n_collectives for r in rows]):.0f} {_per_step(analysed)}: {_by_op(rows)}), "
        f"exposed {mean([r.exposed_comm_ms for r in rows]):.2f} ms",
        f"overlap fraction {_mean_or_na([r.overlap_fraction for r in talking])} per analysed step "
        f"(dpviz's: a step's communication under any compute, averaged; {compute_definition(record)})",
        (f"  with backward  {_mean_or_na([r.backward_overlap_fraction for r in talking])} (from spans; "
         f"DDP's own figure: {'n/a' if ddp is None else f'{ddp:.2f}'}{_recomputed(record)})"
         if any(r.backward_ms for r in rows) else
         "  with backward       n/a (no backward op found in the analysed steps)"),
        *_handover_line(record),
        whole_overlap_line(record),
        breakdown_line(record),
    ]
    if record.checks:   # a loaded trace has no checks: only a live run can compare parameters
        lines += describe_checks(record)
    return "\n".join(lines)


def _mean_or_na(values: list[float]) -> str:
    """The mean, 8 wide with 2 decimals, or n/a where no step communicated."""
    return f"{sum(values) / len(values):8.2f}" if values else "     n/a"


# How the CLI names each whole-window definition (`DEFINITIONS` has them in full).
_NAMED = {"HTA": "HTA 0.5.0's definition, over its window",
          "dpviz": "dpviz's definition, over the analysed steps: HTA has none here"}


def whole_overlap_line(record: RunRecord) -> str:
    """The comm/comp overlap over a whole window, per rank, named by its definition: the
    figure summary.json's `overlap` holds (HTA's where HTA reads the trace)."""
    by_definition: dict[str, list[str]] = defaultdict(list)
    for rank in record_ranks(record):
        value = comm_compute_overlap(record, rank)
        by_definition[overlap_definition(record, rank)].append(
            f"rank {rank} " + ("n/a (no communication)" if value is None else f"{100 * value:.2f} %"))
    return "; ".join(f"comm/comp overlap {_shortened(parts)} ({_NAMED[d]}; summary.json overlap)"
                     for d, parts in sorted(by_definition.items()))


def breakdown_line(record: RunRecord) -> str:
    """The temporal breakdown per rank (idle / compute / non-compute % of its window), named
    by its definition: summary.json's `breakdown`."""
    by_definition: dict[str, list[str]] = defaultdict(list)
    for b in temporal_breakdown(record):
        by_definition[b.definition].append(
            f"rank {b.rank} {b.idle_pct:.2f} / {b.compute_pct:.2f} / {b.non_compute_pct:.2f} % "
            f"of {b.window_ms:.2f} ms")
    return "; ".join(f"idle / compute / non-compute {_shortened(parts)} ({_NAMED[d]}; summary.json "
                     "breakdown)" for d, parts in sorted(by_definition.items())) or \
        "idle / compute / non-compute n/a (no busy span)"


def _shortened(parts: list[str], most: int = 8) -> str:
    """Up to `most` items in full, else the first and last few around a count."""
    if len(parts) <= most:
        return ", ".join(parts)
    return f"{', '.join(parts[:3])}, … {len(parts) - 6} more …, {', '.join(parts[-3:])}"


def compute_definition(record: RunRecord) -> str:
    """What counts as compute in this record's per-step rows, in words."""
    if on_gpu(record.spans):
        return "compute = every GPU kernel but communication"
    if any(s.name == CPU_OPS for s in record.spans):
        hta = any(overlap_definition(record, rank) == "HTA" for rank in record_ranks(record))
        return ("CPU trace: compute = time some CPU op runs on a thread that runs no collective "
                "(dpviz's definition; " + ("HTA's figures count the events on its device "
                                           "streams instead)" if hta else "HTA has none for CPU traces)"))
    return "compute = forward, backward and optimizer ops"


def _handover_line(record: RunRecord) -> list[str]:
    """Why DDP's own figure and the spans' differ, measured: the wait DDP counts as overlap."""
    wait = first_handover_wait_ms(record)
    if wait is None or ddp_overlap_fraction(record) is None:
        return []
    return [f"  DDP's figures start at its first bucket's hand-over; the first transfer or "
            f"all-reduce ran {wait:.2f} ms later (rank 0), a wait they count as overlap and the "
            "spans' figures do not"]


def _per_step(analysed: AnalysedSteps) -> str:
    """'collectives/step', or, where the one step left is DDP's first iteration or its
    rebuild (too few steps recorded), what that step is: its one-time work (the rebuild's
    broadcasts) is no per-step cost."""
    if not analysed.caveats:
        return "collectives/step"
    step = analysed.steps[0]
    return f"collectives in step {step}, DDP's one-time {'first iteration' if step == 0 else 'rebuild step'}"


def _link_part(rows: list[StepSummary]) -> str:
    """'emulated link 4× 19.30 ms, then ' (means per step) where transfers crossed dpviz's
    emulated link, else '': the link's time is in the communication total, so it is named
    beside the collectives it precedes (the two may run at once, so they need not add up)."""
    if not any(r.n_links for r in rows):
        return ""
    mean = lambda values: sum(values) / len(rows)
    return (f"emulated link {mean([r.n_links for r in rows]):.3g}× "
            f"{mean([r.link_ms for r in rows]):.2f} ms, then ")


def _by_op(rows: list[StepSummary]) -> str:
    """'all_reduce 4× 3.10 ms, broadcast 1× 0.20 ms' (means per step), or 'none'."""
    ops = sorted({op for r in rows for op in (*r.comm_ms_by_op, *r.n_by_op)})
    mean = lambda values: sum(values) / len(rows)
    return ", ".join(f"{op} {mean([r.n_by_op.get(op, 0) for r in rows]):.3g}× "
                     f"{mean([r.comm_ms_by_op.get(op, 0.0) for r in rows]):.2f} ms"
                     for op in ops) or "none"


def describe_checks(record: RunRecord) -> list[str]:
    """The two parameter checks, each saying what kind of equality it is: across ranks exact
    by construction; against one process float32 rounding, next to the bound it must obey."""
    from dpviz.core.rounding import describe_difference

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


# --- whole-window figures: HTA's where HTA reads the trace, dpviz's where it has none ------

BUSY_KINDS = frozenset({*COMPUTE_KINDS, *COMM_KINDS, "memcpy"})   # what keeps a GPU (or CPU rank) busy

# The definitions behind each figure, named wherever the figure is shown (CLI, summary.json,
# report): "HTA" where HTA 0.5.0 reads a GPU timeline from the trace, "dpviz" elsewhere.
DEFINITIONS = {
    "HTA": ("HTA 0.5.0's, computed as HTA does from the trace's events: every event on a GPU "
            "stream (a `stream` arg other than -1) that HTA's window keeps, i.e. when the traces "
            "hold two or more ProfilerStep names, those launched before the last ProfilerStep "
            "starts; compute = those not named nccl…Kernel, …Memcpy…, Memset… or …Sync…; "
            "communication = nccl…Kernel; window = first to last of them"),
    "dpviz": ("dpviz's, over the analysed steps (HTA has no figure here): the rank's busy spans "
              "(GPU kernels and memory copies; on a CPU trace, CPU compute and collectives) "
              "cut to whole µs; window = first to last of them"),
    "rows": ("dpviz's, one per step: |communication ∩ compute| / |communication| on the "
             "step's window (a GPU step runs from its first kernel to the next step's first); "
             "compute = kernels other than communication (CPU traces: CPU compute)"),
}


def hta_figures(record: RunRecord, rank: int) -> HtaFigures | None:
    """HTA's figures of a loaded trace's rank (`load_trace` computes them from the events),
    or None for a record that has none (a live run)."""
    data = record.config.get("hta", {}).get(str(rank))
    return HtaFigures(**data) if data else None


def _analysed(record: RunRecord, rank: int) -> list[_Cut]:
    """The rank's busy spans in the analysed steps (a GPU kernel's step is its launch's),
    each cut inward to whole µs of the trace's own clock as HTA does (it rounds a
    ns-resolution event's start up and its end down, pytorch/pytorch#122425: otherwise
    back-to-back kernels overlap by a few ns); a record that does not know its clock's
    origin (`config["clock_origin_us"]`) is rounded on its own clock."""
    steps = set(analysed_steps(record).steps)
    origin = record.config.get("clock_origin_us", 0.0)
    out, ceil, floor = [], math.ceil, math.floor
    for s in record.spans:
        if s.rank == rank and s.kind in BUSY_KINDS and (not steps or s.step in steps):
            start = ceil(s.start_us + origin) - origin
            end = floor(s.end_us + origin) - origin
            out.append(_Cut(start, end if end > start else start, s.kind, s.op))
    return out


def overlap_definition(record: RunRecord, rank: int) -> str:
    """Which definition `comm_compute_overlap` gives for this rank: "HTA" where HTA reads a
    GPU timeline from the rank's trace, else "dpviz"."""
    figures = hta_figures(record, rank)
    return "HTA" if figures is not None and figures.events else "dpviz"


@collector_paused()
def comm_compute_overlap(record: RunRecord, rank: int) -> float | None:
    """The rank's comm/comp overlap, |comm ∩ compute| / |comm| over a whole window (None
    without communication): HTA's `get_comm_comp_overlap` where HTA reads a GPU timeline
    from the trace, else dpviz's over the analysed steps (`DEFINITIONS`)."""
    if overlap_definition(record, rank) == "HTA":
        return hta_figures(record, rank).overlap
    mine = _analysed(record, rank)
    comm = _iv([s for s in mine if s.kind in COMM_KINDS])
    compute = _iv([s for s in mine if s.kind in COMPUTE_KINDS])
    total = length(comm)
    return intersection(comm, compute) / total if total else None


@dataclass(frozen=True)
class Breakdown:
    """The temporal breakdown of one rank: over a window from the first to the last busy
    event, the share of it idle (nothing runs), computing, and busy with no compute
    (communication, memory copies); `definition` names whose (`DEFINITIONS`)."""

    rank: int
    window_ms: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    definition: str = "dpviz"


@collector_paused()
def temporal_breakdown(record: RunRecord) -> list[Breakdown]:
    """Per rank: HTA's `get_temporal_breakdown` where HTA has one for the rank's trace,
    else dpviz's over the analysed steps. A rank whose window has no length (its busy spans
    shorter than a µs) has no shares, and no row."""
    out = []
    for rank in record_ranks(record):
        figures = hta_figures(record, rank)
        if figures is not None and figures.error is None and not figures.window_us:
            continue
        if figures is not None and figures.error is None:
            out.append(Breakdown(rank=rank, window_ms=figures.window_us / 1e3,
                                 idle_pct=figures.percent(figures.idle_us),
                                 compute_pct=figures.percent(figures.compute_us),
                                 non_compute_pct=figures.percent(figures.non_compute_us),
                                 definition="HTA"))
            continue
        mine = _analysed(record, rank)
        window = max(s.end_us for s in mine) - min(s.start_us for s in mine) if mine else 0.0
        if window <= 0:
            continue
        busy = length(_iv(mine))
        compute = length(_iv([s for s in mine if s.kind in COMPUTE_KINDS]))
        pct = lambda us: round(100 * us / window, 2)
        out.append(Breakdown(rank=rank, window_ms=window / 1e3, idle_pct=pct(window - busy),
                             compute_pct=pct(compute), non_compute_pct=pct(busy - compute)))
    return out

"""How Holistic Trace Analysis (HTA) 0.5.0 reads a trace for its two headline figures, the
temporal breakdown and the comm/comp overlap, so dpviz gives the same numbers on other
teams' traces and says, in words, what HTA's reading counts that dpviz's own does not.

HTA does not go by event categories. An event is on the GPU timeline when its `stream`
arg reads as a whole number other than -1 (`int(stream)`; a missing or unreadable one is
-1), whatever its category: kernels and memory copies, but also CUDA syncs and CPU ops
that record a stream. It is a GPU kernel when that stream is ≥ 0 and it has a correlation
id ≥ 0; every other event is a CPU event. When the traces hold two or more distinct
`ProfilerStep` names, HTA keeps a GPU kernel only if a CPU event that started before the
last ProfilerStep (its CPU or GPU annotation, whichever starts later) has the same
correlation id, and a CPU event only if it started before then; otherwise it keeps every
event. A kernel is communication when its name matches `^nccl.*Kernel` and compute unless
its name matches `^nccl.*Kernel`, contains `Memcpy` or `Sync`, or starts with `Memset`.
Timestamps of a trace written with fractional µs are cut inward to whole µs (start up,
end down), as HTA does (pytorch/pytorch#122425), even when that leaves an event ending
before it starts. (Read in hta/common/trace.py, trace_parser.py, trace_filter.py,
analyzers/breakdown_analysis.py, communication_analysis.py and utils/utils.py of
HolisticTraceAnalysis 0.5.0.)
"""
from __future__ import annotations

import functools
import math
import operator
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

# Marks a note about a figure HTA computes differently (and why): summary.json and the report
# list these notes apart.
HTA_DIFFERS = "where HTA differs: "
STEP_WORD = "ProfilerStep"                  # HTA's test for a step name: it contains this
SYNC_NAMES = ("Event Sync", "Context Sync")  # GPU events to HTA though their stream is -1
_COMMUNICATION = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


@functools.lru_cache(maxsize=4096)   # a trace repeats a few hundred kernel names
def kernel_type(name: str) -> str:
    """HTA's type of a GPU event, by its name only: "communication", "memory", "compute" or
    "other" (e.g. a `Stream Sync`: neither compute nor communication)."""
    if _COMMUNICATION.match(name):
        return "communication"
    if _MEMORY.match(name):
        return "memory"
    return "other" if _NOT_COMPUTE.match(name) else "compute"


def stream_number(value: Any) -> int:
    """An event's `stream` arg as HTA reads it: `int(value)`, or -1 when that fails (a
    missing arg, ROCm's '0x0')."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return -1


class Row(NamedTuple):
    """An event HTA puts on the GPU timeline (its stream is not -1)."""

    start: float
    end: float
    name: str
    launch: int | None   # its correlation id when HTA takes it for a GPU kernel; None: a CPU event
    gpu_work: bool       # a kernel or memory copy by its category (what dpviz counts as GPU work)


class HtaTrace:
    """What one trace file tells HTA's two figures, fed one event at a time (`add`).

    Only events with a stream, a correlation id or a ProfilerStep name matter, so a
    caller may skip the others (most CPU ops): `add` would ignore them.
    """

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.launches: dict[int, float] = {}    # correlation id → earliest start of a CPU event with it
        self.last_step: float | None = None     # latest start of a CPU event named ProfilerStep…
        self.last_cpu_step: float | None = None  # ... not counting GPU-side annotations
        self.step_names: set[str] = set()       # distinct names containing ProfilerStep
        self.fractional = False                 # µs written with decimals: HTA rounds them

    def add(self, name: Any, ts: Any, dur: Any, stream: Any, correlation: Any,
            gpu_work: bool, annotation: bool = False) -> None:
        """One complete event, `ts` and `dur` in µs as written (anything else is not HTA's
        either: it drops events without them); a `ts` written with decimals makes HTA round
        the whole trace to whole µs. `annotation`: a GPU-side copy of a CPU annotation (no
        stream: a CPU event to HTA, not GPU work to dpviz)."""
        if type(name) is not str or type(ts) not in _NUMBERS or type(dur) not in _NUMBERS:
            return
        if type(ts) is float:
            self.fractional = True
        number = stream_number(stream) if stream is not None else -1
        corr = correlation if type(correlation) is int else -1
        kernel = (number >= 0 and corr >= 0) or name in SYNC_NAMES
        if STEP_WORD in name:
            self.step_names.add(name)
            if not kernel and (self.last_step is None or ts > self.last_step):
                self.last_step = ts
            if not kernel and not annotation and (self.last_cpu_step is None or ts > self.last_cpu_step):
                self.last_cpu_step = ts
        if not kernel and corr >= 0 and ts < self.launches.get(corr, math.inf):
            self.launches[corr] = ts
        if number != -1:
            self.rows.append(Row(ts, ts + dur, name, corr if kernel else None, gpu_work))

    def reading(self) -> HtaReading:
        """HTA's figures for this file alone and for a job whose traces hold two or more
        ProfilerStep names (only the latter when this file holds two itself)."""
        selections = (True,) if len(self.step_names) >= 2 else (False, True)
        rounded = self._rounded()
        return HtaReading(step_names=frozenset(self.step_names),
                          results={filtered: _result(filtered, *rounded) for filtered in selections})

    def _rounded(self) -> tuple[list[Row], dict[int, float], float | None, float | None]:
        """Rows, launches and last step starts as HTA compares them: cut inward to whole µs
        where the trace writes decimals (starts up, ends down), else as written."""
        if not self.fractional:
            return self.rows, self.launches, self.last_step, self.last_cpu_step
        up, down = math.ceil, math.floor
        return ([Row(up(r.start), down(r.end), r.name, r.launch, r.gpu_work) for r in self.rows],
                {corr: up(t) for corr, t in self.launches.items()},
                None if self.last_step is None else up(self.last_step),
                None if self.last_cpu_step is None else up(self.last_cpu_step))


_NUMBERS = (int, float)


def _result(filtered: bool, rows: list[Row], launches: dict[int, float], last: float | None,
            cpu_last: float | None) -> HtaResult:
    """What HTA counts when its window applies (`filtered`) or not, and its figures."""
    counted: list[Row] = []
    kernels = unlaunched = left_out = in_last_step = 0
    for row in rows:
        start = row.start if row.launch is None else launches.get(row.launch)
        kernels += row.gpu_work and row.launch is not None
        unlaunched += row.gpu_work and row.launch is not None and start is None
        if not filtered or (last is not None and start is not None and start < last):
            counted.append(row)
            in_last_step += (filtered and row.gpu_work and cpu_last is not None and start >= cpu_last)
        elif row.gpu_work and row.launch is not None and start is None:
            left_out += 1
    counted.sort(key=_start_end)   # every merge below reads them in this order
    not_gpu_work = Counter((r.name, kernel_type(r.name)) for r in counted if not r.gpu_work)
    gpu_work = _groups([(r.start, r.end) for r in counted if r.gpu_work]) if not_gpu_work else []
    return HtaResult(figures=_figures(counted), not_gpu_work=not_gpu_work,
                     gpu_work_window_us=gpu_work[-1][1] - gpu_work[0][0] if gpu_work else None,
                     kernels=kernels, unlaunched=unlaunched, unlaunched_left_out=left_out,
                     in_last_step=in_last_step)


_start_end = operator.itemgetter(0, 1)


@dataclass(frozen=True)
class HtaFigures:
    """HTA's two figures for one rank, in µs (None where HTA has none), or why its
    breakdown fails."""

    window_us: float | None = None
    idle_us: float | None = None
    compute_us: float | None = None
    non_compute_us: float | None = None
    overlap: float | None = None     # |comm ∩ compute| / |comm|; None: no communication kernel
    error: str | None = None
    events: int = 0                  # events on a GPU stream it counts (0: HTA sees no GPU timeline)

    def percent(self, us: float | None) -> float | None:
        """A share of the window in percent, rounded to 0.01 as HTA prints it (None when HTA
        has no figure, or its window is empty: HTA's 0/0)."""
        if us is None or not self.window_us:
            return None
        return round(100 * us / self.window_us, 2)


def _figures(counted: list[Row]) -> HtaFigures:
    """HTA's temporal breakdown and comm/comp overlap of the events it counts (sorted)."""
    groups = _groups([(r.start, r.end) for r in counted])
    types = [kernel_type(r.name) for r in counted]
    by_type = {kind: _groups([(r.start, r.end) for r, t in zip(counted, types) if t == kind])
               for kind in ("compute", "communication")}
    overlap = _overlap(by_type["communication"], by_type["compute"])
    if not groups:
        return HtaFigures(error="no event on a GPU stream in HTA's window: its temporal "
                          "breakdown raises (IndexError)")
    window = groups[-1][1] - groups[0][0]
    idle = window - _span(groups)
    compute = _span(by_type["compute"])
    non_compute = window - compute - idle
    if idle > window or compute > window or non_compute < 0:
        return HtaFigures(overlap=overlap, events=len(counted), error="events that end before "
                          "they start once cut to whole µs: HTA's temporal breakdown fails its "
                          "own check (AssertionError)")
    return HtaFigures(window_us=window, idle_us=idle, compute_us=compute,
                      non_compute_us=non_compute, overlap=overlap, events=len(counted))


def _groups(intervals: list[tuple[float, float]]) -> list[list[float]]:
    """HTA's merge of intervals (given sorted by start): one group until a start passes
    every end before it; a group runs from its first start to its latest end (HTA keeps an
    interval that ends before it starts as it is: it shortens its group's busy time)."""
    out: list[list[float]] = []
    reach = -math.inf
    for start, end in intervals:
        if out and start <= reach:
            if end > out[-1][1]:
                out[-1][1] = end
        else:
            out.append([start, end])
        if end > reach:
            reach = end
    return out


def _span(groups: list[list[float]]) -> float:
    return sum(end - start for start, end in groups)


def _overlap(comm: list[list[float]], compute: list[list[float]]) -> float | None:
    """HTA's comm/comp overlap: the time both a communication and a compute group run, over
    the communication groups' time (a sweep over their starts and ends, as HTA's)."""
    total = _span(comm)
    if not total:
        return None
    marks = ([(a, 1) for a, _ in comm] + [(b, -1) for _, b in comm]
             + [(a, 2) for a, _ in compute] + [(b, -2) for _, b in compute])
    marks.sort()
    both, running = 0.0, 0
    for (t, d), (after, _) in zip(marks, marks[1:]):
        running += d
        if running == 3:
            both += after - t
    return both / total


@dataclass(frozen=True)
class HtaResult:
    """HTA's figures for one rank, what they count besides GPU work, and what they leave out."""

    figures: HtaFigures
    not_gpu_work: Counter = field(default_factory=Counter)   # (name, HTA's type) → events counted
    gpu_work_window_us: float | None = None   # the window of its kernels and copies alone
    kernels: int = 0               # kernels and copies with a correlation id
    unlaunched: int = 0            # ... of them, whose correlation id no CPU event has
    unlaunched_left_out: int = 0   # ... of them, left out of HTA's window
    in_last_step: int = 0          # kernels and copies launched in the last ProfilerStep it counts


@dataclass(frozen=True)
class HtaReading:
    """One file's HTA figures, for each way HTA may read it: `results[True]` in a job whose
    traces hold two or more ProfilerStep names (HTA's window applies), `results[False]`
    otherwise (left out when the file itself holds two: the window then always applies)."""

    step_names: frozenset[str]
    results: dict[bool, HtaResult]


def job_results(readings: dict[int, HtaReading]) -> tuple[bool, dict[int, HtaResult]]:
    """Whether HTA's window applies to these ranks' traces read together (two or more
    distinct ProfilerStep names among all of them: HTA keeps one symbol table for the job),
    and each rank's result under that reading."""
    filtered = len(frozenset().union(*(r.step_names for r in readings.values()))) >= 2
    return filtered, {rank: r.results[filtered] for rank, r in readings.items()}


def result_notes(rank: int, result: HtaResult, filtered: bool) -> list[str]:
    """What HTA's figures of this rank count that dpviz's per-step rows do not, or why HTA
    has none, in words (notes marked HTA_DIFFERS are listed apart in summary.json)."""
    out = []
    if result.figures.error:
        out.append(f"rank {rank}: {HTA_DIFFERS}HTA's temporal breakdown has no figure here "
                   f"({result.figures.error}); the breakdown shown is dpviz's own")
    if result.not_gpu_work:
        out.append(f"rank {rank}: {HTA_DIFFERS}{_not_gpu_work(result)}; dpviz's per-step rows "
                   "count kernels and memory copies only")
    if result.in_last_step:
        out.append(f"rank {rank}: {HTA_DIFFERS}HTA's window counts {result.in_last_step} GPU events "
                   "launched in the last ProfilerStep before its GPU-side copy "
                   "(gpu_user_annotation) starts: HTA takes the later of the two as the start of "
                   "the last step, which it leaves out; dpviz's per-step rows leave out the whole "
                   "step")
    if not 0 < result.unlaunched < result.kernels:   # dpviz's rows leave unlaunched kernels out
        return out                                      # only where it links others (else: by start)
    if filtered and result.unlaunched_left_out:
        out.append(f"rank {rank}: {result.unlaunched_left_out} GPU events whose launch is not in "
                   "the trace are outside HTA's window (it keeps a kernel only when a CPU event "
                   "that started before the last ProfilerStep has its correlation id), as they "
                   "are outside every step's row")
    elif not filtered and result.unlaunched:
        out.append(f"rank {rank}: {HTA_DIFFERS}HTA's breakdown and overlap count all "
                   f"{result.unlaunched} GPU events whose launch is not in the trace (its window "
                   "applies only when the traces hold two or more ProfilerStep names, and these "
                   "hold fewer); dpviz's per-step rows leave them out")
    return out


def _not_gpu_work(result: HtaResult) -> str:
    """'HTA's breakdown and overlap count 4 events …: Stream Sync ×4 (not compute to HTA)…'."""
    counts = result.not_gpu_work
    shown = ", ".join(f"{name} ×{n} ({'compute' if kind == 'compute' else 'not compute'} to HTA)"
                      for (name, kind), n in counts.most_common(3))
    more = len(counts) - 3
    text = (f"HTA's breakdown and overlap (the ones shown here) count {sum(counts.values())} "
            f"events that are no kernel or memory copy but carry a stream number: {shown}"
            + (f" and {more} more names" if more > 0 else ""))
    window, alone = result.figures.window_us, result.gpu_work_window_us
    if window is not None and alone is not None and window > alone:
        text += (f"; they stretch its window from {alone / 1e3:.3f} ms (kernels and copies alone) "
                 f"to {window / 1e3:.3f} ms")
    return text

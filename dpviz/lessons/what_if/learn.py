"""What the model learns from one recorded step: forward, each gradient's ready time in
backward, the comm hook's own CPU work, the hand-over to the wire, the all-reduce's cost once
every rank joined, the optimizer, and the parameter sizes.

A live record (`dpviz.run`) gives every gradient: the profiler's `AccumulateGrad` events of
the synchronising micro-step are the gradients in ready order, which the hook's notes (the
buckets' parameters, bucket by bucket) name. A loaded trace gives buckets, not gradients:
each all-reduce is one unit, ready when DDP launched it (its hook, its `c10d::allreduce_`
call, or the kernel itself), so a new cap can merge recorded buckets but never split one.

Ranks differ a little (a busy core, a late hand-over): a rank's all-reduce ends once the
last rank joined it. The model follows one typical rank: each quantity is the median over
every rank and steady step, and the all-reduce's cost is counted from that rank's own
hand-over (its transfer's end, or its call) to its end, so the usual wait for a later rank
is part of it.
No torch here: a saved record is learned from on any machine.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from dpviz.analysis.overlap import quartiles, steady_steps, summarize_step, union
from dpviz.analysis.stragglers import collective_instances
from dpviz.core.link import Link, as_link
from dpviz.core.record import RunRecord, Span
from dpviz.lessons.what_if.load import GlooLoad, work_done

ACCUMULATE_GRAD = "AccumulateGrad"
MIB = 1 << 20

# How many all-reduces a process group runs at once. gloo: its worker threads, 2 unless the
# group's options say otherwise (torch's ProcessGroupGloo default): a bucket handed over while
# one all-reduce runs starts beside it, not after it (benchmarks/README.md, "predict_vs_live").
# NCCL: one communication stream per group, one kernel after the other.
AT_ONCE = {"cpu": 2, "gpu": 1}


class Workers:
    """A process group's workers (`AT_ONCE`), each known by when it is free."""

    def __init__(self, count: int) -> None:
        self.free = [float("-inf")] * count

    def start(self, joined: float) -> float:
        """When an all-reduce joined at `joined` starts: then, or when the earliest-free
        worker frees up, if later."""
        return max(joined, min(self.free))

    def take(self, end: float) -> None:
        """The earliest-free worker runs the all-reduce now starting: it is busy until `end`."""
        self.free[self.free.index(min(self.free))] = end


def ring_factor(world_size: int) -> float:
    """Bytes a ring all-reduce moves per rank, per byte of bucket: 2(N−1)/N."""
    return 2 * (world_size - 1) / world_size


def transfer_ms(link: Link, nbytes: int, world_size: int, wire: str) -> float:
    """One bucket on the wire: 2(N−1)/N × bytes at β, plus α once ("transfer": dpviz's
    emulated link) or once per each of the ring's 2(N−1) messages ("ring")."""
    alphas = 1 if wire == "transfer" else 2 * (world_size - 1)
    return link.transfer_ms(nbytes, world_size) + (alphas - 1) * link.latency_us / 1e3


@dataclass(frozen=True)
class Linear:
    """t(bytes) = fixed_ms + ms_per_mib × MiB: a cost fitted to (bytes, ms) samples."""

    fixed_ms: float
    ms_per_mib: float
    samples: int = 0

    def ms(self, nbytes: float) -> float:
        return self.fixed_ms + self.ms_per_mib * nbytes / MIB


def fit_linear(points: list[tuple[float, float]]) -> Linear:
    """A line through (bytes, ms), both parts kept ≥ 0, fitted by Theil–Sen (the median of the
    slopes between points of different sizes, then the median intercept): on a busy machine a
    few all-reduces that waited for a core would pull a least-squares line anywhere. Sizes
    that barely differ cannot separate the two parts: the cost is then taken as proportional
    to bytes (what grows when a cap makes buckets larger), which `LearnedStep.notes` says."""
    points = [(x / MIB, max(0.0, y)) for x, y in points if x > 0]
    if not points:
        return Linear(0.0, 0.0, 0)
    xs = [x for x, _ in points]
    if max(xs) < 1.5 * min(xs):
        return Linear(0.0, statistics.median(y / x for x, y in points), len(points))
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1:]
              if abs(x2 - x1) > 0.25 * min(x1, x2)]
    slope = max(0.0, statistics.median(slopes))
    fixed = statistics.median(y - slope * x for x, y in points)
    if fixed < 0:
        return Linear(0.0, statistics.median(y / x for x, y in points), len(points))
    return Linear(fixed, slope, len(points))


@dataclass(frozen=True)
class LearnedGradient:
    """One unit of communication-to-be: a gradient (live record) or a recorded bucket (trace)."""

    name: str
    bytes: int
    ready_ms: float     # after backward starts, the comm hooks' own work taken out


@dataclass(frozen=True)
class Measured:
    """What the recorded steps took (the replay check compares against these)."""

    step_ms: float
    exposed_comm_ms: float
    comm_ms: float
    step_ms_quartiles: tuple[float, float]
    steps: int


@dataclass(frozen=True)
class StepSample:
    """One rank's recorded step as the model replays it (ms)."""

    step: int
    rank: int
    offset_ms: float            # its step started this long after the step's first rank's
    pre_ms: float               # step start → the first micro-step's forward
    nosync_ms: float            # one micro-step that all-reduces nothing (accumulation), its
    #                             forward taken out
    forward_ms: float           # the synchronising micro-step's forward
    first_forward_ms: float     # the step's first forward: it follows the previous step's
    #                             all-reduces and optimizer, and with more ranks than cores it
    #                             runs longer than a later one (benchmarks/README.md,
    #                             "predict_vs_live"). With K = 1 it is the synchronising one.
    gap_ms: float               # forward's end → backward's start (the loss)
    backward_ms: float          # backward's compute, the comm hooks taken out
    busy_ms: tuple[tuple[float, float], ...]   # when backward computes (its gaps are idle)
    shared_ms: tuple[tuple[float, float], ...]   # when one of its all-reduces was in flight
    #                             during backward (on a CPU, gloo's worker reduced beside it)
    ready_ms: tuple[float, ...]  # each unit's ready time after backward starts, hooks taken out
    hook_ratio: float           # its later comm hooks' time over the fitted hook cost's
    wire_ratio: float           # its transfers' time over the link's formula's (a GPU kernel
    #                             waits for its peers; 1 on dpviz's link, whose wire keeps the
    #                             formula's time, in records before 12-03 a late thread's wake-up)
    handoff_idle_ms: float      # hook's end → its transfer starts, the wire idle (mean)
    handoff_busy_ms: float      # previous transfer's end → the next starts, the wire busy (mean)
    reduction_ratio: float      # its all-reduces' time over the fitted cost's
    finish_ms: float            # last of (backward, all-reduces) → the optimizer starts
    optimizer_ms: float         # optimizer start → step end
    first_hook_ms: float | None = None   # the step's first comm hook, as measured (None: no hooks)
    micro_ms: tuple[tuple[float, float], ...] = ()   # each micro-step that all-reduced nothing, as
    #                             it ran: (its forward, the rest of it); a rank descheduled in one
    #                             carries it there, and the ranks join the all-reduces that far apart


@dataclass(frozen=True)
class LinkFit:
    """The ring a GPU trace's all-reduce kernels saw, fitted two ways (α per ring message).

    `wire`: on the part of each kernel after the last loaded rank joined it (the straggler
    matching knows each rank's arrival), so waiting for peers is left out. `kernels`: on whole
    kernel durations, which include that waiting. With one rank loaded (or no instance matched
    on every loaded rank) nothing tells the wait from the wire: `wire` is then the kernel fit.
    `includes_waits`: the wire fit still holds waiting for peers (for ranks of the job that
    were not loaded, or for every peer with one rank loaded)."""

    wire: Link
    kernels: Link
    includes_waits: bool
    ranks: int                  # loaded ranks
    instances: int              # all-reduces the wire fit used


@dataclass(frozen=True)
class LearnedStep:
    """One recorded DDP step taken apart into what the model re-assembles (ms)."""

    source: str                 # "live" or "loaded trace"
    device: str                 # "cpu" (gloo reduces on the cores) or "gpu" (NCCL kernels)
    world_size: int
    link: Link | None           # the recorded emulated link (live), the fitted one (GPU trace)
    wire: str                   # how the link charges α: "transfer" (dpviz's emulated link:
    #                             once per bucket) or "ring" (once per each of 2(N−1) messages)
    bucket_cap_mb: float | None
    accum_steps: int
    model: str                  # the workload's name, or "trace"
    gradients: tuple[LearnedGradient, ...]   # in ready order (ready: the median sample's)
    hook: Linear                # DDP's comm hook on the main thread, per bucket after the first
    reduction: Linear           # the all-reduce after a rank's hand-over, to its end
    samples: tuple[StepSample, ...]   # every rank's steady steps, each replayed
    measured: Measured
    per_gradient: bool          # True: gradients; False: recorded buckets as units
    notes: tuple[str, ...] = ()
    fit: LinkFit | None = None  # a GPU trace's fitted ring (the link is `fit.wire`)
    load: GlooLoad | None = None   # gloo under load the reduction cost was learned with (work alone)


def _median(values, default: float = 0.0) -> float:
    values = list(values)
    return statistics.median(values) if values else default


def _iv(spans: list[Span]) -> tuple[float, float]:
    return min(s.start_us for s in spans), max(s.end_us for s in spans)


def _by_bucket(spans: list[Span], kind: str, after_us: float) -> dict[int, Span]:
    """The first span of `kind` per bucket starting at or after `after_us`."""
    out: dict[int, Span] = {}
    for s in sorted(spans, key=lambda s: s.start_us):
        if s.kind == kind and s.bucket is not None and s.start_us >= after_us:
            out.setdefault(s.bucket, s)
    return out


@dataclass
class _Sample:
    """One rank's step, µs on the common clock (what `_sample` reads)."""

    rank: int
    step_start: float
    step_end: float
    micro_starts: list
    micro_forwards: list   # each micro-step's forward (µs), in order
    f0: float
    f1: float
    b0: float
    b1: float
    opt0: float
    busy: list             # backward's compute, merged intervals
    units: list            # (name, bytes, ready_us) in ready order, hooks not yet taken out
    hooks: dict            # bucket → Span
    links: dict            # bucket → Span
    reduces: dict          # bucket → Span (the all-reduce: gloo's, the link thread's, a kernel)
    launches: dict         # bucket → Span (c10d::allreduce_)
    bucket_bytes: dict     # bucket → bytes


def _sample(record: RunRecord, rank: int, step: int, sizes: dict[str, int]) -> _Sample | None:
    spans = record.spans_of(rank=rank, step=step)
    window = [s for s in spans if s.kind == "step"]
    micros = sorted((s for s in spans if s.kind == "micro_step"), key=lambda s: s.start_us)
    if not window:
        return None
    synced_from = micros[-1].start_us if micros else window[0].start_us
    reduces = _by_bucket(spans, "allreduce", synced_from)
    forward = [s for s in spans if s.kind == "forward" and s.start_us >= synced_from]
    backward = [s for s in spans if s.kind in ("backward", "recompute") and s.start_us >= synced_from]
    optimizer = [s for s in spans if s.kind == "optimizer"]
    if not (reduces and forward and backward and optimizer):
        return None
    hooks = _by_bucket(spans, "bucket_hook", synced_from)
    launches = _by_bucket(spans, "allreduce_launch", synced_from)
    noted = {b.index: b for b in record.buckets if b.rank == rank and b.step == step
             and (not micros or b.micro_step == len(micros) - 1)}
    bucket_bytes = {i: (noted[i].bytes if i in noted else s.bytes or 0) for i, s in reduces.items()}
    first_forward = min(s.start_us for s in forward)
    units = _gradient_units(spans, noted, hooks, first_forward, sizes) if noted else None
    if units is None:
        units = [(f"bucket {i}", bucket_bytes[i], _bucket_ready(i, hooks, launches, reduces))
                 for i in sorted(reduces)]
    f0, f1 = _iv([s for s in forward if s.start_us < min(s.start_us for s in backward)] or forward)
    b0, b1 = _iv(backward)
    starts = [m.start_us for m in micros] or [f0]
    return _Sample(rank, window[0].start_us, window[0].end_us, starts, _micro_forwards(spans, starts, f1 - f0),
                   f0, f1, b0, b1, min(s.start_us for s in optimizer if s.start_us >= b0),
                   union([(s.start_us, s.end_us) for s in backward]), units, hooks, _by_bucket(spans, "link", synced_from), reduces, launches, bucket_bytes)


def _micro_forwards(spans: list[Span], starts: list[float], synced_us: float) -> list[float]:
    """Each micro-step's forward (µs): the forward spans from its start to its first backward;
    the synchronising one's as measured for it (`synced_us`)."""
    out = []
    for lo, hi in zip(starts, starts[1:]):
        inside = [s for s in spans if lo <= s.start_us < hi]
        bwd = min((s.start_us for s in inside if s.kind in ("backward", "recompute")), default=hi)
        fwd = [s for s in inside if s.kind == "forward" and s.start_us < bwd]
        start, end = _iv(fwd) if fwd else (0.0, 0.0)
        out.append(end - start)
    return out + [synced_us]


def _bucket_ready(index: int, hooks, launches, reduces) -> float:
    """When DDP handed a bucket over: its hook, else its launch, else the all-reduce itself.
    A GPU kernel waits for the compute stream, not only the launch: where the communication
    stream was idle, the kernel's own start is when the bucket was ready on the GPU."""
    kernel = reduces[index]
    if kernel.tid.startswith("stream") and index not in hooks:
        before = [r.end_us for i, r in reduces.items() if i < index]
        if not before or max(before) < kernel.start_us:
            return kernel.start_us
    for found in (hooks, launches, reduces):
        if index in found:
            return found[index].start_us
    raise KeyError(index)


def _gradient_units(spans: list[Span], noted: dict, hooks: dict, after_us: float,
                    sizes: dict[str, int]) -> list | None:
    """(name, bytes, ready µs) per gradient: the k-th AccumulateGrad of the synced backward is
    the k-th parameter of the buckets in index order (DDP's rebuilt buckets hold them in ready
    order). None where the counts differ (a scoped profile without these events, shared
    parameters): the buckets are the units then."""
    accumulate = sorted((s for s in spans if s.kind == "backward" and s.name.endswith(ACCUMULATE_GRAD)
                         and s.start_us >= after_us), key=lambda s: s.start_us)
    names = [p for i in sorted(noted) for p in noted[i].params]
    if not accumulate or len(accumulate) != len(names) or not hooks:
        return None
    if any(name not in sizes for name in names):
        return None
    return [(name, sizes[name], acc.start_us) for name, acc in zip(names, accumulate)]


def _hooks_before(sample: _Sample, t_us: float) -> float:
    """µs of comm-hook work on the main thread before `t_us` (taken out of backward's time)."""
    return sum(max(0.0, min(h.end_us, t_us) - h.start_us) for h in sample.hooks.values())


def learn(record: RunRecord, steps: list[int] | None = None, load: GlooLoad | None = None) -> LearnedStep:
    """Take a recorded step apart (see the module's docstring); a clear ValueError where the
    record has no step to learn from (no bucketed all-reduce, no forward or optimizer).
    `load`: gloo under load on the recording machine at the record's world size; the
    all-reduce cost is then learned as its work alone: the part of each recorded all-reduce
    that ran beside backward or beside another counts at gloo's measured rates there, and
    the prediction slows it there again (`predict` uses the load the step was learned with)."""
    if load is not None and (not isinstance(load, GlooLoad) or load.world_size != record.world_size):
        raise ValueError(f"load must be a GlooLoad measured at the record's {record.world_size} ranks, got "
                         f"{getattr(load, 'world_size', type(load).__name__)}")
    steps = steady_steps(record) if steps is None else steps
    ranks = sorted({s.rank for s in record.spans})
    sizes = dict(zip(record.param_names, record.param_bytes))
    samples: dict[int, list[_Sample]] = {}
    for step in steps:
        found = [s for r in ranks if (s := _sample(record, r, step, sizes)) is not None]
        if found:
            samples[step] = found
    if not samples:
        raise ValueError("no step to learn from: the record needs a steady step with forward, backward, "
                         "the optimizer and DDP's bucketed all-reduces (record steps >= 2 with profile=True)")
    return _assemble(record, samples, load)


def _assemble(record: RunRecord, samples: dict[int, list[_Sample]], load: GlooLoad | None) -> LearnedStep:
    cfg = record.config
    trace = cfg.get("source") == "trace"
    gpu = any(s.tid.startswith("stream") for s in record.spans if s.kind == "allreduce")
    link = None if trace else as_link(cfg.get("link"))
    world = record.world_size
    per_rank = [s for group in samples.values() for s in group]
    names = [u[0] for u in min(per_rank, key=lambda s: len(s.units)).units]
    alike = [s for s in per_rank if [u[0] for u in s.units] == names]   # the same units in each
    hook = fit_linear([(s.bucket_bytes[i], h.dur_us / 1e3) for s in per_rank for i, h in _later_hooks(s)])
    fit = _fit_gpu_link(record, samples, world) if gpu else None
    if gpu:   # ready is the kernel's start (`_bucket_ready`), NCCL reduces inside the kernel
        link, reduction, costs = fit.wire, Linear(0.0, 0.0, 0), []
    else:
        costs = _reduce_costs(samples, link is not None, load)
        reduction = fit_linear([(b, ms) for b, ms, _ in costs])
    wire = "ring" if gpu else "transfer"
    idle, busy, _ = _handoffs(per_rank, link, world, wire)
    handoffs = (_mean(idle, _mean(busy, 0.0)), _mean(busy, _mean(idle, 0.0))) if not gpu else (0.0, 0.0)
    steps = [_step_sample(s, step, min(x.step_start for x in group), link, world, wire, hook,
                          _ratio([(ms, reduction.ms(b)) for b, ms, owner in costs if owner == id(s)]),
                          handoffs)
             for step, group in samples.items() for s in group if s in alike]
    notes = []
    per_gradient = not names[0].startswith("bucket ")
    if not per_gradient:
        notes.append("units are the recorded buckets (no per-gradient events): a smaller cap cannot split them")
    if not trace and all(len(s.micro_starts) == 1 for s in per_rank):
        notes.append("no micro-step that all-reduces nothing was recorded (K = 1): with accumulation, "
                     "one is taken as long as the synchronising micro-step's forward and backward, "
                     "the comm hooks taken out")
    if reduction.samples and reduction.fixed_ms == 0.0:
        notes.append("all-reduce cost taken as proportional to bytes (the recorded sizes barely differ)")
    sizes = [u[1] for u in alike[0].units]
    return LearnedStep(
        source="loaded trace" if trace else "live", device="gpu" if gpu else "cpu", world_size=world,
        link=link, wire=wire,
        bucket_cap_mb=cfg.get("bucket_cap_mb") if not trace else None,
        accum_steps=max(len(s.micro_starts) for s in per_rank) if not trace else 1,
        model=(record.workload.name if record.workload else f"{cfg.get('backend', '')} job".strip() if trace
               else str(cfg.get("model", "mlp"))),
        gradients=tuple(LearnedGradient(n, int(b), _median(x.ready_ms[k] for x in steps))
                        for k, (n, b) in enumerate(zip(names, sizes))),
        hook=hook, reduction=reduction, samples=tuple(steps),
        measured=measure(record, sorted(samples)), per_gradient=per_gradient, notes=tuple(notes), fit=fit,
        load=None if gpu else load)


def _step_sample(s: _Sample, step: int, first_us: float, link: Link | None, world: int, wire: str,
                 hook: Linear, reduction_ratio: float, handoffs: tuple[float, float]) -> StepSample:
    """One rank's step as the model replays it: its own compute times, its own hand-over
    delays (the record's medians where it had none) and how its hooks and all-reduces ran
    against the fitted costs."""
    rel = lambda t: (t - s.b0 - _hooks_before(s, t)) / 1e3   # the comm hooks before t taken out
    ready = tuple(rel(u[2]) for u in s.units)
    idle, busy, transfers = _handoffs([s], link, world, wire)
    if wire == "ring":   # a GPU's bucket is ready when its kernel starts (`_bucket_ready`)
        idle = busy = []
    comm_end = max(r.end_us for r in s.reduces.values())
    nosync = [(b - a - f) / 1e3 for a, b, f in zip(s.micro_starts, s.micro_starts[1:], s.micro_forwards)]
    return StepSample(
        step=step, rank=s.rank, offset_ms=(s.step_start - first_us) / 1e3, pre_ms=(s.micro_starts[0] - s.step_start) / 1e3,
        nosync_ms=_median(nosync, default=(s.b1 - s.f1 - _hooks_before(s, s.b1)) / 1e3),
        forward_ms=(s.f1 - s.f0) / 1e3, first_forward_ms=s.micro_forwards[0] / 1e3, gap_ms=(s.b0 - s.f1) / 1e3,
        backward_ms=max(rel(s.b1), max(ready, default=0.0)), ready_ms=ready,
        busy_ms=tuple((rel(a), rel(b)) for a, b in s.busy),
        shared_ms=tuple((rel(a), rel(b)) for a, b in union(
            [(max(x.start_us, s.b0), min(x.end_us, s.b1)) for x in s.reduces.values()
             if min(x.end_us, s.b1) > max(x.start_us, s.b0)])),
        hook_ratio=_ratio([(h.dur_us / 1e3, hook.ms(s.bucket_bytes[i])) for i, h in _later_hooks(s)]),
        wire_ratio=_ratio(transfers),
        handoff_idle_ms=max(0.0, _mean(idle, handoffs[0])), handoff_busy_ms=max(0.0, _mean(busy, handoffs[1])),
        reduction_ratio=reduction_ratio,
        finish_ms=(s.opt0 - max(s.b1, comm_end)) / 1e3, optimizer_ms=(s.step_end - s.opt0) / 1e3,
        first_hook_ms=s.hooks[min(s.hooks)].dur_us / 1e3 if len(s.hooks) > 1 else None,
        micro_ms=tuple((f / 1e3, (b - a - f) / 1e3) for a, b, f in zip(s.micro_starts, s.micro_starts[1:], s.micro_forwards)))


def _later_hooks(s: _Sample) -> list[tuple[int, Span]]:
    """The comm hooks after the step's first, which the hook cost is fitted to: the first one
    of a synchronising backward often runs far longer than its bucket's size says (on this
    machine it is where the link's and gloo's threads start their step's work), so a line
    through all of them would charge that to every bucket of a smaller cap. With one hook per
    step, that one."""
    ordered = sorted(s.hooks.items())
    return ordered[1:] if len(ordered) > 1 else ordered


def _ratio(pairs: list[tuple[float, float]]) -> float:
    """Measured over fitted, summed: how much longer than the fit this step's work ran. A
    sum, not a median: a rank descheduled once in a step lost that time from the step."""
    fitted = sum(f for _, f in pairs)
    return sum(m for m, _ in pairs) / fitted if fitted > 0 else 1.0


def _mean(values: list[float], default: float) -> float:
    return statistics.fmean(values) if values else default


def measure(record: RunRecord | list[RunRecord], steps: list[int] | None = None) -> Measured:
    """Median step, exposed and total communication over every rank and steady step (the
    same `summarize_step` figures a predicted step is summarised by); several records (runs of
    one setting) are pooled."""
    records = record if isinstance(record, list) else [record]
    rows = [summarize_step(list(r.spans), rank, step) for r in records
            for step in (steady_steps(r) if steps is None else steps) for rank in sorted({sp.rank for sp in r.spans})]
    if not rows:
        raise ValueError(f"no steps to measure (steps: {[r.steps for r in records]})")
    return Measured(_median(r.step_ms for r in rows), _median(r.exposed_comm_ms for r in rows),
                    _median(r.comm_ms for r in rows), quartiles([r.step_ms for r in rows]),
                    len({(i, row.step) for i, r in enumerate(records) for row in rows}) if len(records) > 1
                    else len({row.step for row in rows}))


def _handoffs(samples: list[_Sample], link: Link | None, world: int, wire: str) -> tuple[list, list, list]:
    """(hook end → transfer start with the wire idle, previous transfer end → next start,
    (a transfer's time, the link's formula's)) of every bucket, ms. Without a link the
    hand-over is from the hook's end (or the launch) to the all-reduce's start; on a GPU the
    kernels are the transfers."""
    idle, busy, extra = [], [], []
    for s in samples:
        starts = s.links if link is not None and wire == "transfer" else s.reduces
        previous_end = None
        for i in sorted(starts):
            handed = s.hooks[i].end_us if i in s.hooks else s.launches[i].end_us if i in s.launches else None
            if handed is None:
                continue
            span = starts[i]
            if previous_end is not None and previous_end > handed:
                busy.append((span.start_us - previous_end) / 1e3)
            else:
                idle.append((span.start_us - handed) / 1e3)
            if link is not None:
                extra.append((span.dur_us / 1e3, transfer_ms(link, s.bucket_bytes[i], world, wire)))
                previous_end = span.end_us
    return idle, busy, extra


def _reduce_costs(samples: dict[int, list[_Sample]], linked: bool,
                  load: GlooLoad | None) -> list[tuple[int, float, int]]:
    """(bytes, ms, id of the rank's sample) of each all-reduce on each rank, from the moment the
    last rank joined it (its transfer's end with a link, else its all-reduce's start), or one
    of gloo's workers freed up if that was later (`AT_ONCE`), to its end on that rank: the
    reduction's own cost, without waiting for a late rank or the earlier buckets. With `load`
    the ms are its work alone: counted at gloo's measured rates while a rank's backward still
    computed and while an earlier one of the rank's all-reduces was in flight (`work_done`; the
    replay slows a bucket's all-reduce by the one before it, as here)."""
    out = []
    for group in samples.values():
        workers = {id(s): Workers(AT_ONCE["cpu"]) for s in group}
        computing = max(s.b1 for s in group)
        for i in sorted(group[0].reduces):
            if not all(i in s.reduces for s in group):
                continue
            joined = max(s.links[i].end_us if linked and i in s.links else s.reduces[i].start_us for s in group)
            for s in group:
                start, end = workers[id(s)].start(joined), s.reduces[i].end_us
                ms = (end - start) / 1e3
                if load is not None:
                    rates = load.rates(s.bucket_bytes[i])
                    others = [(r.start_us, r.end_us, rates.reduce_paired) for j, r in s.reduces.items() if j < i]
                    ms = work_done(start, end, [(-math.inf, computing, rates.reduce_beside_compute), *others]) / 1e3
                out.append((s.bucket_bytes[i], ms, id(s)))
                workers[id(s)].take(end)
    return out


def _fit_gpu_link(record: RunRecord, samples: dict[int, list[_Sample]], world: int) -> LinkFit:
    """A GPU trace's all-reduce kernels as a ring, t = 2(N−1)α + 2(N−1)/N·S/β: fitted to the
    part of each kernel after the last loaded rank joined (`collective_instances`), and to
    whole kernels (which include waiting for the other ranks)."""
    ring = ring_factor(world) if world > 1 else 1.0
    whole = _ring_link(fit_linear([(s.bucket_bytes[i] * ring, r.dur_us / 1e3) for group in samples.values()
                                   for s in group for i, r in s.reduces.items()]), world, "fitted to whole kernels")
    ranks = len({s.rank for group in samples.values() for s in group})
    moved = [(c.bytes * ring, ms) for c in collective_instances(record) if c.step in samples and c.bytes
             and c.op == "all_reduce" for ms in c.move_ms.values()] if ranks > 1 else []
    if not moved:
        return LinkFit(whole, whole, True, ranks, 0)
    wire = _ring_link(fit_linear(moved), world, "fitted after the last rank joined")
    return LinkFit(wire, whole, ranks < world, ranks, len(moved) // ranks)


def _ring_link(cost: Linear, world: int, name: str) -> Link:
    """A fitted line (bytes on each rank's wire → ms) read as a ring's β and α per message."""
    gbps = 8 * MIB / (cost.ms_per_mib / 1e3) / 1e9 if cost.ms_per_mib > 0 else 1e5
    alpha_us = cost.fixed_ms * 1e3 / (2 * (world - 1) if world > 1 else 1)
    return Link(float(f"{min(gbps, 1e5):.3g}"), round(alpha_us, 1), name)


def describe_fit(fit: LinkFit) -> str:
    """One line: the link the model uses for a GPU trace, and in the same line whether its α
    holds waiting for peers; the other fit beside it."""
    w, k = fit.wire, fit.kernels
    head = f"link fitted to the trace's all-reduce kernels: {w.gbps:g} Gb/s, α {w.latency_us:g} µs per ring message"
    if fit.instances == 0:
        return (f"{head} — this fit includes peer waits ({fit.ranks} rank{'s' * (fit.ranks > 1)} loaded, no "
                f"all-reduce matched on all of them: nothing tells waiting for the other ranks from the wire, "
                f"so α holds the waits and is no NCCL latency)")
    waits = ("; it still includes waits for the ranks not loaded" if fit.includes_waits else "")
    return (f"{head}, fitted after the last of {fit.ranks} loaded ranks joined ({fit.instances} all-reduces"
            f"{waits}); on whole kernels, waits included: {k.gbps:g} Gb/s, α {k.latency_us:g} µs")

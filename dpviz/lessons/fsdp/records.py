"""FSDP in time, the data side: the record of one live FSDP2 step and the model of its peak.

What a rank did in the recorded step, unit by unit, on the common clock (ms from the first
rank's step start; local ranks share the machine's monotonic clock): each unit's compute,
each collective FSDP issued (when it was called, its time on the emulated link, when the real
gloo collective finished), the main thread's waits on them, and samples of the bytes of
gathered parameters alive, read from the storage FSDP allocates and frees.

The model of the peak: every rank holds its shards all the time (Ψ/N, with FSDP's padding of
dim 0 to a multiple of N) plus the units in flight — the unit computing, the one prefetched
beside it, and the root where it holds parameters. No torch: renderers and `load()` import
this; the live step is `dpviz.lessons.fsdp.live`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from dpviz.analysis.overlap import intersection
from dpviz.analysis.verdict import describe_comparison
from dpviz.core.link import Link, as_link
from dpviz.core.record import record_kind
from dpviz.core.workloads import WorkloadInfo

OPS = ("all_gather", "reduce_scatter")
PHASES = ("forward", "backward")
GRANULARITIES = ("block", "model")   # a unit per block (layer), or the whole model as one
ROOT = "root"                        # the unit `fully_shard(model)` makes: what no other unit holds
DRAIN = "drain"                      # the wait for the last reduce-scatters before the optimizer
LOSS = "loss"                        # what computes between the model's output and its first backward hook


@dataclass(frozen=True)
class FsdpKnobs:
    """What the knobs set: FSDP2's `reshard_after_forward`, explicit prefetching of the next
    unit's all-gather (forward and backward), and the unit granularity."""

    reshard_after_forward: bool = True
    prefetch: bool = True
    units: str = "block"


def check_knobs(knobs: FsdpKnobs) -> FsdpKnobs:
    """One clear ValueError for a knob value that is not one of its choices; returns knobs."""
    for name in ("reshard_after_forward", "prefetch"):
        value = getattr(knobs, name)
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")
    if knobs.units not in GRANULARITIES:
        raise ValueError(f"units must be one of {', '.join(GRANULARITIES)} (a unit per block, or the "
                         f"whole model as one), got {knobs.units!r}")
    return knobs


# --- the record -------------------------------------------------------------------------------

@dataclass(frozen=True)
class UnitInfo:
    """One FSDP unit: a module `fully_shard` was applied to, and the parameters it holds."""

    name: str                 # the module's path ("blocks.0"), or ROOT for the model itself
    params: tuple[str, ...]   # the parameters it holds (the model's names)
    bytes: int                # their bytes, fp32
    gathered_bytes: int       # one all-gather's storage, measured: dim 0 padded to a multiple of N


@dataclass(frozen=True)
class Compute:
    """A unit's forward or backward on the main thread. `start`..`end` is its compute (FSDP's
    hooks done); `entered`..`left` also covers FSDP's hooks around it (gather, copy, free)."""

    unit: str
    phase: str
    start_ms: float
    end_ms: float
    entered_ms: float
    left_ms: float


@dataclass(frozen=True)
class Transfer:
    """One collective FSDP issued, as the rank's emulated link carried it."""

    unit: str
    op: str                   # one of OPS
    phase: str
    bytes: int                # all-gather: its output (the gathered unit); reduce-scatter: its input
    issued_ms: float          # FSDP called it (main thread)
    link_start_ms: float      # the link was free and took it
    link_end_ms: float        # α + wire bytes / β later
    done_ms: float            # the real gloo collective after it completed
    issued_by: str            # the unit whose FSDP hook issued it: another unit's is a prefetch

    @property
    def prefetched(self) -> bool:
        return self.issued_by != self.unit


@dataclass(frozen=True)
class Wait:
    """The main thread blocked on a collective: exposed communication."""

    unit: str                 # DRAIN for the wait on the last reduce-scatters
    op: str
    phase: str
    start_ms: float
    end_ms: float


@dataclass(frozen=True)
class Sample:
    """Bytes of gathered parameters alive at one instant, per unit (in `FsdpRecord.units` order)."""

    t_ms: float
    params: tuple[int, ...]   # the unit's unsharded parameters' storage
    buffers: tuple[int, ...]  # its all-gather output buffer, before FSDP copies it out

    @property
    def total(self) -> int:
        return sum(self.params) + sum(self.buffers)


@dataclass(frozen=True)
class RankStep:
    """One rank's recorded step."""

    rank: int
    shard_bytes: int          # this rank's shard of every parameter (padded), held all the time
    start_ms: float
    end_ms: float
    forward_end_ms: float
    computes: tuple[Compute, ...]
    transfers: tuple[Transfer, ...]
    waits: tuple[Wait, ...]
    samples: tuple[Sample, ...]


# A record's note when its ranks trained a sharded model they kept from an earlier light run at
# the same knobs (a knob's move, `dpviz.lessons.fsdp.live.fsdp_rank`), restored to its state
# after the warm-up: what its status line says instead of a fresh warm-up just before.
KEPT_NOTE = ("the sharded model kept on the ranks from an earlier move here, restored to its state after that "
             "warm-up step")


@record_kind("fsdp")
@dataclass(frozen=True)
class FsdpRecord:
    """One live FSDP2 training step on every rank (the last of `config["steps"]`)."""

    config: dict
    knobs: FsdpKnobs
    world_size: int
    units: tuple[UnitInfo, ...]    # forward order; the root first where it holds parameters
    ranks: tuple[RankStep, ...]
    full_bytes: int                # Ψ in bytes, unpadded: what DDP and ZeRO-1 keep on every rank
    step: int
    # what the backend ran for each op, from the rank's profiler (gloo: a reduce-scatter is an
    # all-reduce); probed with the single-process check, empty without
    backend_ran: dict[str, str] = field(default_factory=dict)
    max_diff_vs_single_process: float | None = None   # rank 0, after every step: |θ − one-process Adam|
    diff_over_rounding_bound: float | None = None     # ... ÷ its float32 rounding bound (≤ 1: rounding)
    workload: WorkloadInfo | None = None
    notes: tuple[str, ...] = ()

    @property
    def link(self) -> Link | None:
        return as_link(self.config.get("link"))

    def unit_index(self, name: str) -> int:
        for i, unit in enumerate(self.units):
            if unit.name == name:
                return i
        raise ValueError(f"no unit {name!r}; units: {[u.name for u in self.units]}")

    def rank_step(self, rank: int) -> RankStep:
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise ValueError(f"no rank {rank} in this record (ranks 0..{self.world_size - 1})")


# --- the link: what a collective puts on each rank's wire -----------------------------------

def wire_bytes(nbytes: int, world_size: int) -> float:
    """Bytes a ring all-gather (of `nbytes` gathered) or reduce-scatter (of `nbytes` in) puts on
    each rank's link: (N − 1)/N of them, as NCCL's ring moves (half an all-reduce's)."""
    return (world_size - 1) / world_size * nbytes


def transfer_ms(link: Link, nbytes: int, world_size: int) -> float:
    """α + wire bytes / β on `link` for one all-gather or reduce-scatter (ms)."""
    return link.latency_us / 1e3 + wire_bytes(nbytes, world_size) * 8 / (link.gbps * 1e9) * 1e3


# --- the model of the peak ----------------------------------------------------------------------

def padded_bytes(shape: tuple[int, ...], world_size: int, itemsize: int = 4) -> int:
    """What FSDP2 gathers of one parameter: dim 0 padded up to a multiple of N (every rank's
    shard is the same size), so an uneven shape costs a few rows more than its own bytes."""
    rows = shape[0] if shape else 1
    rest = math.prod(shape[1:]) if len(shape) > 1 else 1
    return -(-rows // world_size) * world_size * rest * itemsize


def modelled_unit_bytes(record: FsdpRecord) -> dict[str, int]:
    """Each unit's gathered bytes computed from its parameters' shapes (`padded_bytes`)."""
    shapes = {p.name: p.shape for p in record.workload.params} if record.workload else {}
    return {u.name: sum(padded_bytes(shapes[n], record.world_size) for n in u.params) for u in record.units}


@dataclass(frozen=True)
class PeakModel:
    shard_bytes: int                   # Ψ/N, padded
    in_flight_bytes: int               # the most gathered at once
    in_flight: tuple[str, ...]         # which units those are

    @property
    def peak_bytes(self) -> int:
        return self.shard_bytes + self.in_flight_bytes


def peak_model(units: tuple[UnitInfo, ...], knobs: FsdpKnobs, shard_bytes: int) -> PeakModel:
    """Ψ/N plus the units in flight at the worst moment, from the schedule FSDP runs:

    - whole model as one unit: all of it, from its all-gather to its free;
    - reshard_after_forward=False: every unit stays gathered from its forward to its
      backward, so at the end of forward all of them are;
    - otherwise the unit computing, plus the one prefetched under it (the next in forward,
      the previous in backward) when prefetching; plus the root where it holds parameters,
      gathered from the first forward to the end of backward (it wraps every other unit).
    """
    root = [u for u in units if u.name == ROOT]
    blocks = [u for u in units if u.name != ROOT]
    if knobs.units == "model" or not blocks or not knobs.reshard_after_forward:
        return PeakModel(shard_bytes, sum(u.gathered_bytes for u in units), tuple(u.name for u in units))
    pairs = [(b,) for b in blocks]
    if knobs.prefetch:
        pairs = [tuple(blocks[i:i + 2]) for i in range(max(1, len(blocks) - 1))]
    worst = max(pairs, key=lambda pair: sum(u.gathered_bytes for u in pair))
    chosen = (*root, *worst)
    return PeakModel(shard_bytes, sum(u.gathered_bytes for u in chosen), tuple(u.name for u in chosen))


def record_peak_model(record: FsdpRecord, rank: int = 0) -> PeakModel:
    return peak_model(record.units, record.knobs, record.rank_step(rank).shard_bytes)


def peak_gap_bound(record: FsdpRecord) -> int:
    """How far above the model a measured peak may lie: one unit, the largest. Between the end
    of an all-gather and FSDP dropping its output buffer, the unit exists twice (buffer and
    copied-out parameters); a sample can land in that copy-out when another thread's event (the
    link finishing a collective) falls in it. The model counts a unit once."""
    return max(u.gathered_bytes for u in record.units)


# --- reading a rank's step ------------------------------------------------------------------------

def measured_peak(step: RankStep) -> int:
    """Shards + the most gathered bytes of any sample."""
    return step.shard_bytes + max((s.total for s in step.samples), default=0)


def alive_spans(step: RankStep, index: int, what: str = "params") -> list[tuple[float, float]]:
    """(from, to) ms over which unit `index`'s gathered parameters (or buffer) had bytes: from
    the first sample that saw them to the first that saw them gone (the step's end if never)."""
    spans, since = [], None
    for s in step.samples:
        alive = getattr(s, what)[index] > 0
        if alive and since is None:
            since = s.t_ms
        elif not alive and since is not None:
            spans.append((since, s.t_ms))
            since = None
    if since is not None:
        spans.append((since, step.end_ms))
    return spans


def exposed_ms(step: RankStep) -> float:
    """Time the main thread waited on collectives (all-gathers and the final drain)."""
    return sum(w.end_ms - w.start_ms for w in step.waits)


def peer_wait_ms(record: FsdpRecord, step: RankStep) -> float:
    """Of the rank's waits (its exposed communication), the time its own part of a collective
    had crossed the link while some peer's had not: the real collective cannot run before
    every rank's part has arrived, so that wait is for a slower peer, not the wire. The same
    collective on every rank is the same (unit, op, phase) at the same turn."""
    latest: dict[tuple, float] = {}
    for other in record.ranks:
        for key, t in _turns(other):
            latest[key] = max(latest.get(key, t.link_end_ms), t.link_end_ms)
    behind = [(t.link_end_ms, latest[key]) for key, t in _turns(step) if latest[key] > t.link_end_ms]
    return intersection([(w.start_ms, w.end_ms) for w in step.waits], behind)


def link_wait_ms(record: FsdpRecord, step: RankStep) -> float:
    """The rank's exposed communication less its peer wait: its own transfers on the link, and
    the real collectives once every rank's part had arrived."""
    return exposed_ms(step) - peer_wait_ms(record, step)


def _turns(step: RankStep) -> list[tuple[tuple, Transfer]]:
    """((unit, op, phase, n), transfer): the n-th collective of that unit, op and phase."""
    seen: dict[tuple, int] = {}
    out = []
    for t in step.transfers:
        key = (t.unit, t.op, t.phase)
        seen[key] = seen.get(key, -1) + 1
        out.append(((*key, seen[key]), t))
    return out


def run_link_wait_ms(record: FsdpRecord) -> float:
    """A run's link wait, the mean over its ranks: the quantity 09b's prefetch verdict compares."""
    return summarize(record).link_wait_ms


def count(step: RankStep, op: str, phase: str | None = None) -> int:
    return sum(1 for t in step.transfers if t.op == op and (phase is None or t.phase == phase))


def own_compute(record: FsdpRecord, step: RankStep) -> list[tuple[str, str, float, float]]:
    """(unit, phase, start, end) of what each unit computed itself: the root's window wraps every
    other unit (it is the model), so the other units' windows, hooks included, are cut out of it.
    The loss (no unit's) runs from the model's output to the end of forward, and its backward
    from there until the first unit's pre-backward hook."""
    inner = sorted((c.entered_ms, c.left_ms) for c in step.computes if c.unit != ROOT)
    forward = [c.end_ms for c in step.computes if c.phase == "forward"]
    backward = [c.entered_ms for c in step.computes if c.phase == "backward"]
    out = []
    if forward and backward:
        out += [(LOSS, "forward", max(forward), step.forward_end_ms),
                (LOSS, "backward", step.forward_end_ms, min(backward))]
    for c in step.computes:
        if c.unit != ROOT:
            out.append((c.unit, c.phase, c.start_ms, c.end_ms))
            continue
        t = c.start_ms
        for a, b in inner:
            if b <= t or a >= c.end_ms:
                continue
            if a > t:
                out.append((c.unit, c.phase, t, a))
            t = max(t, b)
        if t < c.end_ms:
            out.append((c.unit, c.phase, t, c.end_ms))
    return sorted(out, key=lambda seg: seg[2])


@dataclass(frozen=True)
class Lifetime:
    """One unit's gathered parameters in one pass on one rank: when its all-gather was issued
    and finished, when the parameters had bytes, and when the unit computed (ms)."""

    unit: str
    phase: str
    issued_ms: float | None      # None: no all-gather this pass (kept from forward)
    gathered_ms: float | None
    born_ms: float
    compute_ms: tuple[float, float]
    freed_ms: float
    prefetched: bool


def lifetimes(record: FsdpRecord, step: RankStep) -> list[Lifetime]:
    """Per unit and pass, its parameters' life on this rank, read from the samples (`alive_spans`)
    beside its all-gather and compute: what notebook 09b prints and the tests check."""
    out = []
    for i, unit in enumerate(record.units):
        spans = alive_spans(step, i)
        for phase in PHASES:
            c = next((c for c in step.computes if c.unit == unit.name and c.phase == phase), None)
            span = next((sp for sp in spans if c is not None and sp[0] <= c.start_ms <= sp[1]), None)
            if c is None or span is None:
                continue
            ag = next((t for t in step.transfers if t.unit == unit.name and t.op == "all_gather"
                       and t.phase == phase), None)
            out.append(Lifetime(unit.name, phase, ag.issued_ms if ag else None, ag.done_ms if ag else None,
                                span[0], (c.start_ms, c.end_ms), span[1], bool(ag and ag.prefetched)))
    return sorted(out, key=lambda lt: lt.compute_ms[0])


def describe_lifetimes(record: FsdpRecord, rank: int = 0) -> str:
    """A table of `lifetimes`, ms from the step's start."""
    step = record.rank_step(rank)
    t0 = step.start_ms
    fmt = lambda t: "      —" if t is None else f"{t - t0:7.1f}"
    lines = [f"rank {rank}, ms from the step's start ('—': no all-gather, the parameters were kept)",
             f"{'unit':9s} {'pass':8s} {'gather issued':>13s} {'gathered':>8s} {'alive from':>10s} "
             f"{'compute':>15s} {'freed':>7s}  prefetched"]
    for lt in lifetimes(record, step):
        lines.append(f"{lt.unit:9s} {lt.phase:8s} {fmt(lt.issued_ms):>13s} {fmt(lt.gathered_ms):>8s} "
                     f"{fmt(lt.born_ms):>10s} {fmt(lt.compute_ms[0])}–{fmt(lt.compute_ms[1]).strip():7s} "
                     f"{fmt(lt.freed_ms)}  {'yes' if lt.prefetched else ''}")
    return "\n".join(lines)


@dataclass(frozen=True)
class FsdpSummary:
    """What a knob move changes, over ranks: the highest measured peak, the model's, the mean
    exposed communication and step time, and the collectives each rank issued."""

    peak_bytes: int
    model_bytes: int
    exposed_ms: float
    step_ms: float
    all_gathers: int
    reduce_scatters: int
    peer_wait_ms: float = 0.0     # of exposed_ms: waiting for a slower peer's part
    link_wait_ms: float = 0.0     # ... and the rest: the wire and the collective itself


def summarize(record: FsdpRecord) -> FsdpSummary:
    steps = record.ranks
    return FsdpSummary(
        peak_bytes=max(measured_peak(s) for s in steps),
        model_bytes=max(record_peak_model(record, s.rank).peak_bytes for s in steps),
        exposed_ms=sum(exposed_ms(s) for s in steps) / len(steps),
        step_ms=sum(s.end_ms - s.start_ms for s in steps) / len(steps),
        all_gathers=count(steps[0], "all_gather"), reduce_scatters=count(steps[0], "reduce_scatter"),
        peer_wait_ms=sum(peer_wait_ms(record, s) for s in steps) / len(steps),
        link_wait_ms=sum(link_wait_ms(record, s) for s in steps) / len(steps))


def mib(nbytes: float) -> str:
    return f"{nbytes / 2 ** 20:.2f} MiB"


def describe_knobs(knobs: FsdpKnobs) -> str:
    return (f"units per {knobs.units}, reshard_after_forward={knobs.reshard_after_forward}, "
            f"prefetch {'on' if knobs.prefetch else 'off'}")


def describe_change(before: FsdpRecord | None, after: FsdpRecord) -> str:
    """One line for a knob move: peak bytes, exposed communication, all-gathers per step, each
    as before → after (the first run: its values alone)."""
    a = summarize(after)
    if before is None:
        return (f"peak {mib(a.peak_bytes)} (model {mib(a.model_bytes)}), exposed communication "
                f"{a.exposed_ms:.1f} ms (link wait {a.link_wait_ms:.1f}, peer wait {a.peer_wait_ms:.1f}), "
                f"{a.all_gathers} all-gathers per step")
    b = summarize(before)
    return (f"peak {mib(b.peak_bytes)} → {mib(a.peak_bytes)} (model {mib(a.model_bytes)}), exposed "
            f"communication {b.exposed_ms:.1f} → {a.exposed_ms:.1f} ms (link wait {b.link_wait_ms:.1f} → "
            f"{a.link_wait_ms:.1f}, peer wait {b.peer_wait_ms:.1f} → {a.peer_wait_ms:.1f}), all-gathers "
            f"per step {b.all_gathers} → {a.all_gathers}")


def describe(record: FsdpRecord) -> str:
    """A table per unit (bytes, collectives, how long each unit's gather was exposed on rank 0),
    then the peak against the model on every rank."""
    s0 = record.ranks[0]
    lines = [f"{record.workload.name if record.workload else 'model'} on {record.world_size} ranks, "
             f"{describe_knobs(record.knobs)}; step {record.step}, recorded live",
             f"{'unit':10s} {'params B':>10s} {'gathered B':>10s} {'all-gathers':>11s} "
             f"{'prefetched':>10s} {'reduce-scatters':>15s}"]
    for u in record.units:
        ags = [t for t in s0.transfers if t.unit == u.name and t.op == "all_gather"]
        lines.append(f"{u.name:10s} {u.bytes:10,d} {u.gathered_bytes:10,d} {len(ags):11d} "
                     f"{sum(t.prefetched for t in ags):10d} "
                     f"{sum(1 for t in s0.transfers if t.unit == u.name and t.op == 'reduce_scatter'):15d}")
    for s in record.ranks:
        model = record_peak_model(record, s.rank)
        lines.append(f"rank {s.rank}: shards {mib(s.shard_bytes)}, peak {mib(measured_peak(s))} measured, "
                     f"{mib(model.peak_bytes)} model (Ψ/N + {' + '.join(model.in_flight)}); exposed "
                     f"communication {exposed_ms(s):.1f} ms of a {s.end_ms - s.start_ms:.1f} ms step")
    lines.append(f"DDP and ZeRO-1 keep the full replica on every rank: {mib(record.full_bytes)}")
    return "\n".join(lines)


def describe_prefetch_verdict(result) -> str:
    """Notebook 09b's prefetch lesson from `live.prefetch_verdict`'s interleaved runs (an
    `engine.verdicts.SizedComparison` of `FsdpRecord`s): per arm, the median over runs of the
    exposed communication and its link-wait and peer-wait parts (each run: the mean over its
    ranks), then the verdict on link wait (`dpviz.analysis.verdict`)."""
    median = statistics.median
    c = result.comparison
    lines = [f"{'':13} {'exposed':>8} {'peer wait':>9} {'link wait':>9}   ms, medians over {len(c.a)} "
             "interleaved runs each (a run: the mean over its ranks)"]
    for name in c.names:
        runs = [summarize(r) for r in result.runs[name]]
        lines.append(f"{name:13} {median(r.exposed_ms for r in runs):>8.1f} "
                     f"{median(r.peer_wait_ms for r in runs):>9.1f} {median(r.link_wait_ms for r in runs):>9.1f}")
    lines.append(describe_comparison(c))
    if c.lower == c.names[0]:
        lines.append(f"so prefetching lowered the wait for the link by {c.difference_ms:.1f} ms a step on this run")
    elif c.lower == c.names[1]:
        lines.append("prefetching did not lower the wait for the link on this run: the runs without it waited less")
    else:
        lines.append("so this run cannot say that prefetching lowered the wait for the link")
    return "\n".join(lines)

# Over 300 lines: the bucket data side in three sections (layout, one step's timing, the cap sweep).
"""DDP's gradient buckets, read from a live run: layout, per-step timing, the cap sweep.

DDP does not all-reduce gradients one by one: it packs them into buckets of about
`bucket_cap_mb` and all-reduces a bucket as soon as its last gradient is ready, so
communication runs beside the rest of backward. Three facts of torch 2.13 shape what we see:

1. Iteration 0 uses ONE bucket holding every gradient: DDP does not yet know the order
   gradients become ready. After it, DDP rebuilds the buckets in that observed order
   (about the reverse of the parameter order).
2. The rebuild packs greedily: gradients join the current bucket until it holds at least
   the cap, then a new bucket starts (`assign_buckets`, a model of
   torch's own assignment function (`dpviz.engine.torch_gate.bucket_assignment`), checked against it in tests).
3. Only DDP's default (`bucket_cap_mb=None`) caps the first bucket at 1 MiB (the last
   layers' gradients, ready first, start communicating early); an explicit cap caps all.

Everything here is a pure function of records (no torch), so a saved run is analysed and
drawn without ranks. The rank side, the torch rank task `torch_assignment` and the live
`sweep`, is `dpviz.lessons.buckets.live`.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from dpviz.analysis.overlap import intersection, length, minus, quartiles, steady_steps, summarize, union
from dpviz.analysis.stragglers import link_wait_ms, split_medians
from dpviz.analysis.verdict import MIN_RUNS, describe_comparison, judge
from dpviz.core.bucket_layout import (
    DEFAULT_CAP_MB, MIB, ONE_BUCKET_CAP_MB, assign_buckets, cap_limits,
)
from dpviz.core.record import Bucket, RunRecord, record_kind
from dpviz.lessons.exercises.records import Verdict

SLIDER_CAPS = (0.25, 0.5, 1.0, 2.0, 4.0, 25.0, ONE_BUCKET_CAP_MB)   # bucket_cap_mb a slider offers
SLIDER_GBPS = (0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 100.0)              # emulated link Gb/s a slider offers
Intervals = list[tuple[float, float]]


# --- layout: which gradients each bucket holds --------------------------------------------

def step_buckets(record: RunRecord, step: int, rank: int = 0) -> list[Bucket]:
    """The buckets the comm hook saw in one step's synchronising (last) micro-step."""
    mine = [b for b in record.buckets if b.rank == rank and b.step == step]
    if not mine:
        raise ValueError(f"no buckets for rank {rank} in step {step}: was the run profiled? "
                         f"(steps with buckets: {sorted({b.step for b in record.buckets})})")
    last = max(b.micro_step for b in mine)
    return sorted((b for b in mine if b.micro_step == last), key=lambda b: b.index)


@dataclass(frozen=True)
class LoggedLayout:
    """DDP's own account of its buckets (`torch_gate.ddp_logging_data` on one rank)."""

    bucket_cap_bytes: int
    initial_sizes: tuple[int, ...]            # iteration 0's buckets, bytes
    rebuilt_sizes: tuple[int, ...]            # after the rebuild, bytes
    rebuilt_params: tuple[tuple[int, ...], ...]  # parameter indices per bucket, ready order

    @property
    def ready_order(self) -> list[int]:
        return [i for bucket in self.rebuilt_params for i in bucket]


def _ints(text) -> tuple[int, ...]:
    return tuple(int(t) for t in str(text).replace(",", " ").split())


def logged_layout(record: RunRecord, rank: int = 0) -> LoggedLayout:
    """Parse DDP's logging strings ('4204548, 4202496', '17 16 15, 14 13') into numbers."""
    data = record.ddp_logging.get(rank, {})
    if "rebuilt_per_bucket_param_indices" not in data:
        raise ValueError(f"rank {rank}'s DDP logging has no rebuilt buckets: run at least 3 steps "
                         "(DDP rebuilds its buckets in step 1 and logs them in step 2)")
    return LoggedLayout(
        bucket_cap_bytes=int(data["bucket_cap_bytes"]),
        initial_sizes=_ints(data["bucket_sizes"]),
        rebuilt_sizes=_ints(data["rebuilt_bucket_sizes"]),
        rebuilt_params=tuple(_ints(b) for b in str(data["rebuilt_per_bucket_param_indices"]).split(",")))


def modelled_layout(record: RunRecord, rank: int = 0) -> list[list[int]]:
    """Parameter indices per bucket that `assign_buckets` predicts for this run's rebuild."""
    order = logged_layout(record, rank).ready_order
    sizes = [record.param_bytes[i] for i in order]
    limits = cap_limits(record.config.get("bucket_cap_mb"))
    return [[order[p] for p in bucket] for bucket in assign_buckets(sizes, limits)]


@dataclass(frozen=True)
class Gradient:
    """One parameter's gradient as DDP packs it: ready position, name, bytes, its bucket."""

    position: int
    name: str
    bytes: int
    bucket: int


def gradients(record: RunRecord, rank: int = 0) -> list[Gradient]:
    """Every gradient in the order DDP's rebuilt buckets hold them (its logging), labelled
    with the recorded parameter names ("blocks.3.attn.qkv.weight")."""
    logged = logged_layout(record, rank)
    out = []
    for bucket, indices in enumerate(logged.rebuilt_params):
        for i in indices:
            out.append(Gradient(len(out), record.param_names[i], record.param_bytes[i], bucket))
    return out


def notable_gradients(grads: list[Gradient], top: int = 3) -> tuple[list[Gradient], Gradient]:
    """(one gradient of each of the `top` largest sizes, the smallest), each the first DDP
    packs of its size: the figure names the gradients the text does, and an MLP's 24 equal
    layers get one name, not three."""
    first: dict[int, Gradient] = {}
    for g in sorted(grads, key=lambda g: g.position):
        first.setdefault(g.bytes, g)
    largest = [first[size] for size in sorted(first, reverse=True)[:top]]
    return largest, first[min(first)]


def _size(n: int) -> str:
    return f"{n / MIB:.2f} MiB" if n >= MIB / 4 else f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


def describe_gradients(record: RunRecord, rank: int = 0) -> str:
    """The gradients' sizes and how DDP's rebuilt buckets hold them, in a few lines: the
    largest and smallest gradient, then each bucket's size, count and first/last names."""
    grads = gradients(record, rank)
    (big, *_), small = notable_gradients(grads)
    alike = sum(g.bytes == big.bytes for g in grads)
    name = record.workload.name if record.workload else "mlp"
    lines = [f"{name}: {len(grads)} gradients, {_size(sum(g.bytes for g in grads))} in all; "
             f"largest {big.name} {_size(big.bytes)}"
             + (f" (first packed of {alike} that size)" if alike > 1 else "")
             + f", smallest {small.name} {_size(small.bytes)} ({big.bytes / small.bytes:,.0f}x)",
             f"buckets after the rebuild (bucket_cap_mb={record.config.get('bucket_cap_mb')}, "
             f"first bucket's cap {_size(cap_limits(record.config.get('bucket_cap_mb'))[0])}):"]
    for b in sorted({g.bucket for g in grads}):
        held = [g for g in grads if g.bucket == b]
        lines.append(f"  bucket {b}: {_size(sum(g.bytes for g in held)):>10}, {len(held):3d} gradients, "
                     f"{held[0].name} … {held[-1].name}")
    return "\n".join(lines)


# --- timing: one step of one rank ---------------------------------------------------------

@dataclass(frozen=True)
class BucketTiming:
    """One bucket in one step, ms from the step's start on the common clock."""

    index: int
    bytes: int
    params: tuple[str, ...]
    ready_ms: float    # DDP called the comm hook: the bucket's last gradient was ready
    start_ms: float    # its all-reduce started on a gloo worker thread ...
    end_ms: float      # ... and ended
    link_start_ms: float | None = None   # with an emulated link: its transfer (before
    link_end_ms: float | None = None     # the real all-reduce), else None

    @property
    def comm_ms(self) -> float:
        """From the start of its transfer (or all-reduce) to the end of its all-reduce."""
        return self.end_ms - self.comm_start_ms

    @property
    def comm_start_ms(self) -> float:
        return self.start_ms if self.link_start_ms is None else self.link_start_ms

    @property
    def link_ms(self) -> float | None:
        return None if self.link_start_ms is None else self.link_end_ms - self.link_start_ms


@dataclass(frozen=True)
class StepTimeline:
    """What the bucket timeline draws for one rank and step (ms from `t0_us`)."""

    rank: int
    step: int
    t0_us: float
    forward: Intervals
    backward: Intervals        # autograd ops on the main thread
    optimizer: Intervals
    buckets: tuple[BucketTiming, ...]
    exposed: Intervals         # some all-reduce runs and nothing computes
    backward_end_ms: float     # the last backward op ends ...
    comm_end_ms: float         # ... the last all-reduce ends: the optimizer waits for it

    @property
    def wait_ms(self) -> float:
        """How long the step waited for communication after backward's last op."""
        return max(0.0, self.comm_end_ms - self.backward_end_ms)


@dataclass(frozen=True)
class StoryBeat:
    """One section of the bucket-overlap animation: where the clock runs to, and its caption."""

    to_ms: float
    caption: str
    name: str


def bucket_story(tl: StepTimeline) -> list[StoryBeat]:
    """The animation's sections with captions built from the step it replays: how many
    buckets fired before backward ended, how much communication (link transfer and
    all-reduce) ran beside backward, how long the optimizer waited. A one-bucket step is told
    as one: nothing runs beside backward."""
    n, end = len(tl.buckets), tl.backward_end_ms
    early = sum(b.ready_ms < end for b in tl.buckets)
    comm = [(b.comm_start_ms, b.end_ms) for b in tl.buckets]
    beside = intersection(comm, tl.backward)
    forward = StoryBeat(min(s for s, _ in tl.backward), "forward: activations are kept for backward", "forward")
    if n == 1:
        fire = StoryBeat(tl.buckets[0].ready_ms, "backward: the one bucket fires only when its last gradient, "
                         "the whole model's, is ready", "buckets fire")
    else:
        fire = StoryBeat(tl.buckets[-1].ready_ms, f"backward: {early} of {n} buckets fire before backward "
                         "ends, each once its last gradient is ready", "buckets fire")
    total = length(comm)
    overlap = StoryBeat(end, f"{beside:.1f} of {total:.1f} ms of communication ran beside the remaining backward"
                        if beside >= 0.05 * total else
                        f"almost nothing ran beside backward ({beside:.1f} of {total:.1f} ms): the communication "
                        "comes after it", "overlap")
    wait = StoryBeat(step_end_ms(tl),
                     f"the optimizer waits {tl.wait_ms:.1f} ms for the last bucket, then updates" if tl.wait_ms > 0
                     else "no bucket was still in flight: the optimizer starts when backward ends", "optimizer waits")
    return [forward, fire, overlap, wait]


def step_end_ms(tl: StepTimeline) -> float:
    """When the step's last work ends: its optimizer, or its last all-reduce."""
    return max([e for _, e in tl.optimizer] + [tl.comm_end_ms])


def story_summary(tl: StepTimeline) -> str:
    """The animation's last line: communication in the step (link transfers and all-reduces,
    as drawn) and what of it nothing hid."""
    comm = length([(b.comm_start_ms, b.end_ms) for b in tl.buckets])
    linked = [(b.link_start_ms, b.link_end_ms) for b in tl.buckets if b.link_start_ms is not None]
    parts = (f" (link transfers {length(linked):.1f} ms, all-reduces "
             f"{length([(b.start_ms, b.end_ms) for b in tl.buckets]):.1f} ms)" if linked else "")
    return (f"communication {comm:.1f} ms in all{parts}; exposed (nothing computing beside it) "
            f"{sum(e - s for s, e in tl.exposed):.1f} ms")


def step_timeline(record: RunRecord, step: int | None = None, rank: int = 0,
                  t0_us: float | None = None) -> StepTimeline:
    """Bucket readiness, all-reduces and compute of one step of one rank.

    `t0_us` sets the origin (default: the step's start on this rank); pass the same one
    for every rank to draw ranks on one clock.
    """
    step = steady_steps(record)[-1] if step is None else step
    spans = record.spans_of(rank=rank, step=step)
    window = [s for s in spans if s.kind == "step"]
    if not window:
        raise ValueError(f"step {step} has no spans on rank {rank} (steps: {record.steps})")
    t0 = window[0].start_us if t0_us is None else t0_us
    ms = lambda us: (us - t0) / 1e3
    iv = lambda kind: union([(ms(s.start_us), ms(s.end_us)) for s in spans if s.kind == kind])
    last_micro = max((s for s in spans if s.kind == "micro_step"), key=lambda s: s.start_us,
                     default=window[0])
    late = lambda kind: {s.bucket: s for s in spans if s.kind == kind and s.start_us >= last_micro.start_us}
    comm, link = late("allreduce"), late("link")
    buckets = []
    for b in step_buckets(record, step, rank):
        if b.index not in comm:
            raise ValueError(f"bucket {b.index} of step {step} has no all-reduce span on rank {rank}")
        s, wire = comm[b.index], link.get(b.index)
        buckets.append(BucketTiming(b.index, b.bytes, b.params, ms(b.hook_us), ms(s.start_us), ms(s.end_us),
                                    None if wire is None else ms(wire.start_us),
                                    None if wire is None else ms(wire.end_us)))
    compute = iv("forward") + iv("backward") + iv("recompute") + iv("optimizer")
    backward = iv("backward")
    return StepTimeline(
        rank=rank, step=step, t0_us=t0, forward=iv("forward"), backward=backward,
        optimizer=iv("optimizer"), buckets=tuple(buckets),
        exposed=minus([(b.comm_start_ms, b.end_ms) for b in buckets], compute),
        backward_end_ms=max((e for _, e in backward), default=0.0),
        comm_end_ms=max(b.end_ms for b in buckets))


@dataclass(frozen=True)
class Prediction:
    """One bucket's all-reduce in a training step beside the alpha-beta model (ms).

    A collective cannot finish before every rank has joined it, so the time measured on one
    rank includes waiting for the slowest rank to reach the same bucket; `joined_ms` counts
    only from the moment the last rank started it.
    """

    index: int
    bytes: int
    measured_ms: float    # start → end on `rank` (with a link: its transfer's start)
    joined_ms: float      # last rank's start → end on `rank`
    predicted_ms: float   # model.time_ms(bytes)
    link_ms: float | None = None   # the emulated link's transfer alone, if the run had one


def predictions(record: RunRecord, model, step: int | None = None, rank: int = 0) -> list[Prediction]:
    """Each bucket's all-reduce time in `step` on `rank`, with and without waiting for the
    other ranks, beside `model.time_ms(bytes)` (a link's `LinkModel`, or an `AlphaBeta` fit)."""
    step = steady_steps(record)[-1] if step is None else step
    starts = [s.start_us for s in record.spans_of(kind="step", step=step)]
    timelines = [step_timeline(record, step, r, t0_us=min(starts)) for r in range(record.world_size)]
    out = []
    for k, b in enumerate(timelines[rank].buckets):
        last_join = max(tl.buckets[k].comm_start_ms for tl in timelines)
        out.append(Prediction(b.index, b.bytes, b.comm_ms, max(0.0, b.end_ms - last_join),
                              model.time_ms(b.bytes), b.link_ms))
    return out


def describe_predictions(preds: Sequence[Prediction]) -> str:
    """Each bucket's measured time beside the model's, and the median error (notebook 03 §2)."""
    linked = all(p.link_ms is not None for p in preds)
    head = f"{'bucket':>6} {'MiB':>5} {'link ms':>8} " if linked else f"{'bucket':>6} {'MiB':>5} "
    lines = [head + f"{'transfer+all-reduce':>19} {'after last rank joined':>22} {'model':>6}  (ms, rank 0)"]
    for p in preds:
        link = f"{p.link_ms:>8.2f} " if linked else ""
        lines.append(f"{p.index:>6} {p.bytes / MIB:>5.2f} {link}{p.measured_ms:>19.2f} {p.joined_ms:>22.2f} "
                     f"{p.predicted_ms:>6.2f}")
    if preds:
        measured = [p.link_ms if linked else p.joined_ms for p in preds]
        errors = sorted(abs(m / p.predicted_ms - 1) for m, p in zip(measured, preds))
        what = "link spans" if linked else "all-reduces after the last rank joined"
        lines.append(f"model vs {what}: median error {statistics.median(errors):.0%}, "
                     f"worst {errors[-1]:.0%}")
    return "\n".join(lines)


def describe_cpu_sharing(raw: CapRow, linked: CapRow) -> str:
    """The same workload with gloo on the cores (raw loopback) and with the emulated link
    (communication sleeps): how much slower backward runs when the all-reduces share its cores."""
    return (f"backward, median: {raw.backward_ms:.1f} ms on raw loopback vs {linked.backward_ms:.1f} ms "
            f"with the emulated link ({raw.backward_ms / linked.backward_ms:.2f}x): the measured cost of "
            f"computing the all-reduces on the cores that run backward"
            if linked.backward_ms else "no backward time measured")


def link_predictions(record: RunRecord, rank: int = 0) -> list[Prediction]:
    """Each bucket of every steady step beside the link's own alpha-beta model: how well the
    emulated wire keeps its promise under load (a sleeping thread can wake late)."""
    from dpviz.core.link import as_link

    link = as_link(record.config.get("link"))
    if link is None:
        raise ValueError("this run had no emulated link (RunConfig.link is None): nothing to compare")
    model = link.model(record.world_size)
    return [p for step in steady_steps(record) for p in predictions(record, model, step, rank)]


# --- the bucket_cap_mb sweep --------------------------------------------------------------

@dataclass(frozen=True)
class CapRow:
    """One cap's live run: medians over its steady steps and all ranks (ms)."""

    bucket_cap_mb: float
    n_buckets: int
    step_ms: float
    comm_ms: float            # wall time some all-reduce runs
    exposed_comm_ms: float    # ... while nothing computes
    overlap_fraction: float   # all-reduce time under backward ÷ all-reduce time
    samples: int              # (rank, step) pairs the medians are over
    step_ms_quartiles: tuple[float, float] = (0.0, 0.0)   # the spread: 25th, 75th percentile
    backward_ms: float = 0.0  # median backward time (it slows when gloo shares its cores)
    exposed_ms_quartiles: tuple[float, float] = (0.0, 0.0)   # the spread of exposed_comm_ms
    link_waits: tuple[float, ...] = ()   # each run's link wait (stragglers.link_wait_ms), in run order
    peer_wait_ms: float = 0.0            # median over runs of each run's peer wait


@record_kind("bucket_sweep")
@dataclass(frozen=True)
class BucketSweep:
    """step time and exposed communication against bucket_cap_mb, one live run per cap."""

    config: dict              # the RunConfig every cap shared (bucket_cap_mb aside)
    world_size: int
    rows: tuple[CapRow, ...]


def cap_row(*records: RunRecord) -> CapRow:
    """Summarise live runs of one cap (medians over all their steady steps and ranks:
    CPU timings are noisy, and pooling repeats taken at different moments evens out load)."""
    rows = [r for record in records for r in summarize(record, steady_steps(record))]
    if not rows:
        raise ValueError("no profiled steps to summarise: run with profile=True and steps >= 2")
    caps = {record.config.get("bucket_cap_mb") for record in records}
    if len(caps) != 1:
        raise ValueError(f"records with different caps {sorted(map(str, caps))} make one row each")
    cap, last = caps.pop(), records[-1]
    med = statistics.median
    return CapRow(
        bucket_cap_mb=float(DEFAULT_CAP_MB if cap is None else cap),
        n_buckets=len(step_buckets(last, steady_steps(last)[-1])),
        step_ms=med([r.step_ms for r in rows]), comm_ms=med([r.comm_ms for r in rows]),
        exposed_comm_ms=med([r.exposed_comm_ms for r in rows]),
        overlap_fraction=med([r.backward_overlap_fraction for r in rows]), samples=len(rows),
        step_ms_quartiles=quartiles([r.step_ms for r in rows]),
        backward_ms=med([r.backward_ms for r in rows]),
        exposed_ms_quartiles=quartiles([r.exposed_comm_ms for r in rows]),
        link_waits=tuple(link_wait_ms(r) for r in records),
        peer_wait_ms=med([split_medians(r).peer_wait_ms for r in records]))


def spread_ms(row: CapRow) -> float:
    """Interquartile range of a row's step times: the run-to-run noise of this machine."""
    return row.step_ms_quartiles[1] - row.step_ms_quartiles[0]


def describe_overlap(bucketed: CapRow, one: CapRow) -> str:
    """The overlap lesson as a table and a verdict, both from the runs (notebook 03 §3)."""
    lines = [f"{'':14} {'buckets':>7} {'step ms':>8} {'(IQR)':>13} {'backward':>8} {'comm':>6} "
             f"{'exposed':>7} {'overlap':>7}   medians of {bucketed.samples} rank-steps"]
    for name, r in ((f"{bucketed.bucket_cap_mb:g} MiB cap", bucketed), ("one bucket", one)):
        lo, hi = r.step_ms_quartiles
        lines.append(f"{name:14} {r.n_buckets:>7} {r.step_ms:>8.1f} {f'{lo:.0f}-{hi:.0f}':>13} "
                     f"{r.backward_ms:>8.1f} {r.comm_ms:>6.1f} {r.exposed_comm_ms:>7.1f} "
                     f"{r.overlap_fraction:>7.0%}")
    lines.append(hidden_verdict(bucketed, one))
    gain, noise = one.step_ms - bucketed.step_ms, max(spread_ms(bucketed), spread_ms(one))
    verdict = "shorter" if gain > 0 else "longer"
    lines.append(f"the bucketed step is {abs(gain):.1f} ms {verdict} (median); run-to-run spread "
                 f"(IQR) up to {noise:.1f} ms: " + ("the difference exceeds the spread" if abs(gain) > noise
                                                   else "the spread exceeds the difference, so this run "
                                                        "cannot tell which step is faster"))
    return "\n".join(lines)


def overlap_share(bucketed: CapRow, one: CapRow) -> float | None:
    """The share of one bucket's exposed communication the buckets hid (may be negative on a
    noisy run: callers print it only through `hidden_verdict`); None if one bucket exposed none."""
    if not one.exposed_comm_ms:
        return None
    return (one.exposed_comm_ms - bucketed.exposed_comm_ms) / one.exposed_comm_ms


def hidden_verdict(bucketed: CapRow, one: CapRow) -> str:
    """How much exposed communication the buckets hid against one bucket, named only when the
    difference exceeds the runs' spread (IQR) of exposed communication; never a negative share."""
    hidden = one.exposed_comm_ms - bucketed.exposed_comm_ms
    noise = max(q[1] - q[0] for q in (bucketed.exposed_ms_quartiles, one.exposed_ms_quartiles))
    if not one.exposed_comm_ms:
        return "the one-bucket run exposed no communication: nothing for overlap to hide"
    if hidden > noise:
        return (f"overlap hid {hidden:.1f} of {one.exposed_comm_ms:.1f} ms of exposed communication on "
                f"this run ({hidden / one.exposed_comm_ms:.0%}; spread of exposed communication, IQR, "
                f"up to {noise:.1f} ms)")
    if hidden > 0:
        return (f"the buckets exposed {hidden:.1f} ms less communication than one bucket "
                f"({bucketed.exposed_comm_ms:.1f} vs {one.exposed_comm_ms:.1f} ms), within the spread "
                f"(IQR up to {noise:.1f} ms): this run cannot say that overlap hid any")
    return (f"overlap hid nothing measurable on this run: the buckets exposed {bucketed.exposed_comm_ms:.1f} ms "
            f"of communication, one bucket {one.exposed_comm_ms:.1f} ms (spread, IQR, up to {noise:.1f} ms)")


def describe_overlap_verdict(result) -> str:
    """Notebook 03 §3's table and verdict from `live.overlap_verdict`'s interleaved runs (an
    `engine.verdicts.SizedComparison`): per setting, the median over runs of each run's exposed
    communication, its peer-wait and link-wait parts (`analysis.stragglers.split_medians`); the
    verdict on link wait (`analysis.verdict`); how much overlap hid, only when the verdict says
    the buckets waited less; and the re-sizing, if the link was re-sized."""
    c = result.comparison
    lines = [f"{'':11} {'exposed':>8} {'peer wait':>9} {'link wait':>9}   ms, medians over {len(c.a)} "
             "interleaved runs each (a run: its median over ranks and analysed steps)"]
    for name in c.names:
        per_run = [split_medians(r) for r in result.runs[name]]
        med = [statistics.median(getattr(m, f) for m in per_run)
               for f in ("exposed_ms", "peer_wait_ms", "link_wait_ms")]
        lines.append(f"{name:11} {med[0]:>8.1f} {med[1]:>9.1f} {med[2]:>9.1f}")
    lines.append(describe_comparison(c))
    one = c.median(1)
    if c.lower == c.names[0]:
        lines.append(f"so overlap hid {c.difference_ms:.1f} of the {one:.1f} ms one bucket waits for the link "
                     f"({c.difference_ms / one:.0%}) on this run")
    elif c.lower == c.names[1]:
        lines.append("the buckets waited longer for the link than one bucket: overlap hid nothing on this run")
    else:
        lines.append("so this run cannot say that overlap hid any link wait")
    return "\n".join(lines + ([result.resized] if result.resized else []))


def cap_label(cap: float | None, sep: str = " ") -> str:
    """'1', '0.25', 'default', and 'one bucket' for a cap no demo model fills (not '4096.0')."""
    if cap is None:
        return "default"
    return f"one{sep}bucket" if cap >= ONE_BUCKET_CAP_MB else f"{cap:g}"


def format_sweep(result: BucketSweep) -> str:
    """The sweep as a table and its verdict (CLI and notebooks print the same lines): on link
    wait where the rows hold each run's (`link_sweep_verdict`), else on step time."""
    if not result.rows:
        return "no rows"
    lines = [f"{'cap MiB':>10} {'buckets':>7} {'step ms':>8} {'(IQR)':>11} {'comm ms':>8} {'exposed ms':>10} "
             f"{'link wait':>9} {'peer wait':>9} {'overlap':>7}  (medians of {result.rows[0].samples} rank-steps; "
             f"link and peer wait: of {len(result.rows[0].link_waits)} runs)"]
    lines += [f"{cap_label(r.bucket_cap_mb):>10} {r.n_buckets:>7} {r.step_ms:>8.1f} "
              f"{f'{r.step_ms_quartiles[0]:.0f}-{r.step_ms_quartiles[1]:.0f}':>11} {r.comm_ms:>8.1f} "
              f"{r.exposed_comm_ms:>10.1f} {_median_or_dash(r.link_waits):>9} {r.peer_wait_ms:>9.1f} "
              f"{r.overlap_fraction:>7.2f}" for r in result.rows]
    verdict = link_sweep_verdict(result) if all(r.link_waits for r in result.rows) else sweep_verdict(result)
    return "\n".join(lines + [verdict])


def _median_or_dash(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def _cap_name(row: CapRow) -> str:
    return cap_label(row.bucket_cap_mb) + ("" if row.bucket_cap_mb >= ONE_BUCKET_CAP_MB else " MiB")


def sweep_settled(result: BucketSweep) -> bool:
    """Whether more runs could change the link-wait verdict's shape: not once the best cap is
    an end, or each end has been told apart from it (either way)."""
    rows = result.rows
    if len(rows[0].link_waits) < MIN_RUNS:
        return False
    best = min(rows, key=lambda r: statistics.median(r.link_waits))
    ends = [r for r in (rows[0], rows[-1]) if r is not best]
    return len(ends) < 2 or all(judge("link wait", ("best", "end"), list(best.link_waits),
                                      list(r.link_waits)).lower is not None for r in ends)


def link_sweep_verdict(result: BucketSweep) -> str:
    """The sweep's shape read from link wait, not step time (a step carries compute drift,
    link wait does not): the cap with the least median link wait, and whether each end of the
    sweep waits longer than it beyond the spread (`dpviz.analysis.verdict`'s rule on the two
    caps' runs). A U needs both ends. The best cap is picked from the same runs first, so the
    rule's false-alarm bound holds for each end's comparison only given that pick."""
    rows = result.rows
    runs = len(rows[0].link_waits)
    best = min(rows, key=lambda r: statistics.median(r.link_waits))
    text = f"least link wait: {_cap_name(best)} ({statistics.median(best.link_waits):.1f} ms, median of {runs} runs)"
    if runs < MIN_RUNS:
        return text + (f"; with {runs} runs per cap the rule cannot tell any two caps apart "
                       f"(it needs {MIN_RUNS}): run more repeats for a shape")
    ends = [(name, r) for name, r in zip(("tiny caps", "one bucket"), (rows[0], rows[-1])) if r is not best]
    if len(ends) < 2:
        return text + "; it is an end of the sweep: no U on this run"
    judged = [(name, judge("link wait", (_cap_name(best), _cap_name(r)), list(best.link_waits), list(r.link_waits)))
              for name, r in ends]
    slower = [name for name, c in judged if c.lower == c.names[0]]
    text += "; " + ", ".join(f"{name} {c.difference_ms:+.1f} ms (p = {c.p:.3f})" for name, c in judged)
    return text + ": " + ("both ends wait longer beyond the spread, a U" if len(slower) == 2 else
                          f"only {slower[0]} wait longer beyond the spread, so this run shows no U" if slower else
                          "neither end waits longer beyond the spread, so this run shows no shape")


def sweep_verdict(result: BucketSweep) -> str:
    """Where this sweep's best cap lies, whether the ends are worse (the U), and whether
    the differences exceed the run-to-run spread — read from the rows, not assumed."""
    rows = result.rows
    best = min(rows, key=lambda r: r.step_ms)
    ends = [r for r in (rows[0], rows[-1]) if r is not best]
    noise = max(spread_ms(r) for r in rows)
    text = f"fastest: {cap_label(best.bucket_cap_mb)}{'' if best.bucket_cap_mb >= ONE_BUCKET_CAP_MB else ' MiB'} ({best.n_buckets} buckets, {best.step_ms:.1f} ms)"
    if len(ends) == 2:
        arms = [(name, r.step_ms - best.step_ms) for name, r in zip(("tiny caps", "one bucket"), ends)]
        text += "; " + ", ".join(f"{name} {gap:+.1f} ms" for name, gap in arms)
        slower = [name for name, gap in arms if gap > noise]
        text += (f" against a spread (IQR) up to {noise:.1f} ms: "
                 + ("both ends slower beyond the spread, a U" if len(slower) == 2 else
                    f"only {slower[0]} slower beyond the spread, so this run shows no U" if slower else
                    "neither end slower beyond the spread, so this run shows no shape"))
    elif len(rows) > 1:
        text += "; the fastest cap is at an end of the sweep: no U on this run"
    gaps = [abs(r.step_ms - best.step_ms) for r in rows if r is not best]
    if gaps and min(gaps) < noise:
        text += (f". Spread (IQR up to {noise:.1f} ms) exceeds the smallest gap ({min(gaps):.1f} ms): "
                 "the nearest caps are not told apart by this run")
    return text


# --- the exercise's check, as the report and its figure read it ---------------------------

@dataclass(frozen=True)
class BucketCase:
    """One model's gradients, packed by you and by torch (parameter indices per bucket)."""

    model: str
    bucket_cap_mb: float | None
    param_bytes: tuple[int, ...]                 # in parameter (definition) order
    torch: tuple[tuple[int, ...], ...]           # torch's own (torch_gate.bucket_assignment)
    yours: tuple[tuple[int, ...], ...] = ()


@record_kind("buckets_exercise")
@dataclass(frozen=True)
class BucketsCheck:
    verdict: Verdict
    cases: tuple[BucketCase, ...]
    first_diff: int | None = None                # the first case where yours differs

    @property
    def yours(self) -> BucketCase | None:
        return None if self.first_diff is None else self.cases[self.first_diff]

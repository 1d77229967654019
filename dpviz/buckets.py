"""DDP's gradient buckets, read from a live run: layout, per-step timing, the cap sweep.

DDP does not all-reduce gradients one by one: it packs them into buckets of about
`bucket_cap_mb` and all-reduces a bucket as soon as its last gradient is ready, so
communication runs beside the rest of backward. Three facts of torch 2.13 shape what we see:

1. Iteration 0 uses ONE bucket holding every gradient: DDP does not yet know the order
   gradients become ready. After it, DDP rebuilds the buckets in that observed order
   (about the reverse of the parameter order).
2. The rebuild packs greedily: gradients join the current bucket until it holds at least
   the cap, then a new bucket starts (`assign_buckets`, a model of
   `torch.distributed._compute_bucket_assignment_by_size`, checked against it in tests).
3. Only DDP's default (`bucket_cap_mb=None`) caps the first bucket at 1 MiB (the last
   layers' gradients, ready first, start communicating early); an explicit cap caps all.

Everything here except the rank task `torch_assignment` and `sweep` is a pure function of
records, so a saved run can be analysed without ranks.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from .record import Bucket, RunRecord, record_kind
from .timeline import intersection, steady_steps, summarize, union

MIB = 1 << 20
DEFAULT_CAP_MB = 25              # DDP's bucket_cap_mb when left unset
FIRST_BUCKET_BYTES = 1 << 20     # dist._DEFAULT_FIRST_BUCKET_BYTES (a test checks it)
ONE_BUCKET_CAP_MB = 4096.0       # a cap no demo model fills: every gradient in one bucket
Intervals = list[tuple[float, float]]


# --- layout: which gradients each bucket holds --------------------------------------------

def cap_limits(bucket_cap_mb: float | None) -> list[int]:
    """Byte limits DDP rebuilds with: first bucket's, then every later one's (torch 2.13)."""
    if bucket_cap_mb is None:
        return [FIRST_BUCKET_BYTES, DEFAULT_CAP_MB * MIB]
    return [int(bucket_cap_mb * MIB)]


def assign_buckets(sizes: Sequence[int], limits: Sequence[int]) -> list[list[int]]:
    """Greedy packing, as DDP does it: positions into `sizes` (bytes, ready order) per bucket.

    A bucket closes once it holds at least its limit (so one large gradient can overshoot
    it); limit k applies to bucket k, and the last limit to every bucket after.
    """
    if not limits or min(limits) < 1:
        raise ValueError(f"bucket limits must be positive byte counts, got {list(limits)}")
    buckets, current, filled = [], [], 0
    for position, size in enumerate(sizes):
        current.append(position)
        filled += size
        if filled >= limits[min(len(buckets), len(limits) - 1)]:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


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
    """DDP's own account of its buckets (`ddp._get_ddp_logging_data()` on one rank)."""

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


def torch_assignment(ctx, sizes: list[int], order: list[int], limits: list[int]) -> list[list[int]]:
    """Rank task: torch's own `_compute_bucket_assignment_by_size` on float32 gradients of
    `sizes` bytes taken in ready `order` (parameter indices), as DDP's rebuild calls it."""
    import torch
    import torch.distributed as dist

    tensors = [torch.empty(sizes[i] // 4) for i in order]  # float32: 4 bytes per element
    buckets, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [False] * len(order), order)
    return [list(b) for b in buckets]


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

    @property
    def comm_ms(self) -> float:
        return self.end_ms - self.start_ms


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


def minus(a: Intervals, b: Intervals) -> Intervals:
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
    comm = {s.bucket: s for s in spans if s.kind == "allreduce" and s.start_us >= last_micro.start_us}
    buckets = []
    for b in step_buckets(record, step, rank):
        if b.index not in comm:
            raise ValueError(f"bucket {b.index} of step {step} has no all-reduce span on rank {rank}")
        s = comm[b.index]
        buckets.append(BucketTiming(b.index, b.bytes, b.params, ms(b.hook_us), ms(s.start_us), ms(s.end_us)))
    compute = iv("forward") + iv("backward") + iv("recompute") + iv("optimizer")
    backward = iv("backward")
    return StepTimeline(
        rank=rank, step=step, t0_us=t0, forward=iv("forward"), backward=backward,
        optimizer=iv("optimizer"), buckets=tuple(buckets),
        exposed=minus([(b.start_ms, b.end_ms) for b in buckets], compute),
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
    measured_ms: float    # start → end on `rank`
    joined_ms: float      # last rank's start → end on `rank`
    predicted_ms: float   # model.time_ms(bytes)


def predictions(record: RunRecord, model, step: int | None = None, rank: int = 0) -> list[Prediction]:
    """Each bucket's all-reduce time in `step` on `rank`, with and without waiting for the
    other ranks, beside `model.time_ms(bytes)` (an `AlphaBeta` fitted to isolated calls)."""
    step = steady_steps(record)[-1] if step is None else step
    starts = [s.start_us for s in record.spans_of(kind="step", step=step)]
    timelines = [step_timeline(record, step, r, t0_us=min(starts)) for r in range(record.world_size)]
    out = []
    for k, b in enumerate(timelines[rank].buckets):
        last_join = max(tl.buckets[k].start_ms for tl in timelines)
        out.append(Prediction(b.index, b.bytes, b.comm_ms, max(0.0, b.end_ms - last_join),
                              model.time_ms(b.bytes)))
    return out


def allreduce_model(cluster, sizes: Sequence[int] = (4 << 10, 256 << 10, 1 << 20, 4 << 20),
                    repeats: int = 5):
    """Fit the collectives' alpha-beta model to a small live `dist.all_reduce` sweep on
    `cluster` (sizes in bytes, spanning the buckets' sizes)."""
    from .collectives.bandwidth import fit_alpha_beta
    from .collectives.timing import bench_collectives

    bench = bench_collectives(sizes=list(sizes), ops=("all_reduce",), warmup=1, repeats=repeats,
                              cluster=cluster, progress=False)
    return fit_alpha_beta(bench.select("all_reduce", cluster.world_size))


# --- the bucket_cap_mb sweep --------------------------------------------------------------

@dataclass(frozen=True)
class SweepRow:
    """One cap's live run: medians over its steady steps and all ranks (ms)."""

    bucket_cap_mb: float
    n_buckets: int
    step_ms: float
    comm_ms: float            # wall time some all-reduce runs
    exposed_comm_ms: float    # ... while nothing computes
    overlap_fraction: float   # all-reduce time under backward ÷ all-reduce time
    samples: int              # (rank, step) pairs the medians are over


@record_kind("bucket_sweep")
@dataclass(frozen=True)
class BucketSweep:
    """step time and exposed communication against bucket_cap_mb, one live run per cap."""

    config: dict              # the RunConfig every cap shared (bucket_cap_mb aside)
    world_size: int
    rows: tuple[SweepRow, ...]


def sweep_row(*records: RunRecord) -> SweepRow:
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
    return SweepRow(
        bucket_cap_mb=float(DEFAULT_CAP_MB if cap is None else cap),
        n_buckets=len(step_buckets(last, steady_steps(last)[-1])),
        step_ms=med([r.step_ms for r in rows]), comm_ms=med([r.comm_ms for r in rows]),
        exposed_comm_ms=med([r.exposed_comm_ms for r in rows]),
        overlap_fraction=med([r.backward_overlap_fraction for r in rows]), samples=len(rows))


def sweep_config(**changes):
    """The sweep's workload: 24 layers of width 256 (256 KiB of gradient each), so caps of
    0.25 to 25 MiB give 24 down to 1 buckets, and a step stays well under 0.1 s on 2 CPU ranks."""
    from .config import RunConfig

    return RunConfig(layers=24, width=256, batch_per_rank=128, steps=5).replace(**changes)


def sweep(caps: Sequence[float], cfg=None, cluster=None, repeats: int = 2,
          progress: bool = True, warmup: bool = True) -> BucketSweep:
    """Re-run the same workload live for each cap on warm ranks; one row per cap.

    Caps run round-robin `repeats` times, so a burst of load on the machine lands on every
    cap rather than on one. `warmup` first runs once untimed.
    """
    from tqdm.auto import tqdm

    from .config import validate
    from .ddp_run import run
    from .launch import Cluster

    caps = [float(c) for c in caps]
    if not caps or min(caps) <= 0:
        raise ValueError(f"give at least one bucket cap > 0 (MiB), e.g. 0.25,1,4,25; got {caps}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a whole number >= 1, got {repeats!r}")
    cfg = validate(cfg or sweep_config())
    if cfg.steps < 3:
        raise ValueError(f"a sweep needs steps >= 3 (step 0 uses one bucket; medians need more), "
                         f"got {cfg.steps}")
    if cluster is None:
        with Cluster(cfg.world_size, cfg.backend, cfg.timeout_s) as fresh:
            return sweep(caps, cfg, fresh, repeats, progress)
    if warmup:  # a cluster's first run pays one-off costs (skip it on ranks that already ran)
        run(cfg.replace(steps=2), cluster)
    records: dict[float, list[RunRecord]] = {cap: [] for cap in caps}
    bar = tqdm(total=len(caps) * repeats, desc="bucket_cap_mb", disable=not progress)
    for _ in range(repeats):
        for cap in caps:
            bar.set_postfix_str(f"{cap:g} MiB")
            records[cap].append(run(cfg.replace(bucket_cap_mb=cap), cluster))
            bar.update()
    bar.close()
    return BucketSweep(config={**cfg.to_dict(), "bucket_cap_mb": None}, world_size=cfg.world_size,
                       rows=tuple(sweep_row(*records[cap]) for cap in caps))


def format_sweep(result: BucketSweep) -> str:
    """The sweep as a table (CLI and notebooks print the same lines)."""
    lines = [f"{'cap MiB':>8} {'buckets':>7} {'step ms':>8} {'comm ms':>8} {'exposed ms':>10} "
             f"{'overlap':>7}  (medians of {result.rows[0].samples} rank-steps)" if result.rows else "no rows"]
    lines += [f"{r.bucket_cap_mb:>8g} {r.n_buckets:>7} {r.step_ms:>8.1f} {r.comm_ms:>8.1f} "
              f"{r.exposed_comm_ms:>10.1f} {r.overlap_fraction:>7.2f}" for r in result.rows]
    return "\n".join(lines)

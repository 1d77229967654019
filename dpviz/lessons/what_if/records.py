# Over 300 lines: the model (one step re-assembled), its record, the scaling table and the
# live check's record, which all share the model's vocabulary.
"""The what-if model: a recorded step re-assembled at another world size, link, bucket cap
and accumulation, and the records that hold its answers.

From what `dpviz.lessons.what_if.learn` took apart it builds one step: K − 1 micro-steps that
all-reduce nothing, then the synchronising one whose gradients become ready as recorded;
torch's bucket assignment (`dpviz.core.bucket_layout.assign_buckets`, checked against torch's
own) packs them at the new cap; each bucket's comm hook runs on the main thread, its
transfer waits in one FIFO queue for the wire (α + ring bytes/β), then the all-reduce's own
cost once every rank joined, and the optimizer starts once backward and the last bucket are
done. Whose costs: replaying the recorded machine, what it measured (on a CPU record gloo's
reduction on the cores, the hand-overs, the wire's lateness); on another link, the target
cluster's own (the link's formula, a reduction preset or none, the compute as recorded or
scaled), which every record lists under `config["costs"]`. What it leaves out, and which way
each item moves the prediction, is in every record it makes (`NOT_MODELLED`).

No torch here: a saved record is predicted from and drawn on any machine.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from dpviz.analysis.overlap import intersection, summarize_step, union
from dpviz.core.bucket_layout import assign_buckets, cap_limits
from dpviz.core.link import Link, Reduction, as_link, as_reduction
from dpviz.core.record import RunRecord, Span, record_kind
from dpviz.lessons.what_if.learn import (
    AT_ONCE, LearnedStep, MIB, StepSample, Workers, learn, ring_factor, transfer_ms,
)
from dpviz.lessons.what_if.load import GlooLoad

FACADE = ("predict",)   # what `dpviz.<name>` offers from here
WIRES = ("transfer", "ring")
RECORDED = "recorded"      # a setting left as the recorded step had it
MAX_WORLD_SIZE = 1 << 20
NOT_MODELLED = (   # each item says which way it moves the prediction
    "contention: every rank has the link to itself, nothing else crosses it (adds time: a shared "
    "link or switch only slows transfers)",
    "stragglers beyond the recorded ones: each recorded rank is replayed with its own timings and a "
    "bucket's all-reduce waits for the latest of them, but N ranks are not N draws of lateness (adds "
    "time: the latest of more ranks is later)",
    "topology beyond one flat ring: no tree, hierarchical (NVLink-then-NIC) or in-network reduction "
    "(can subtract: they cut the ring's 2(N−1)α, which a large N pays in full here; a slower hop in a "
    "hierarchy can add)",
    "compute is the recorded rank's, times the stated factor: it changes with N only where `cores` "
    "says ranks share CPU cores (either way: a faster device subtracts, a smaller per-rank batch "
    "subtracts, a kernel that scales worse adds)",
    "a target cluster's reduction is its preset (memory bandwidth, pipelined with the wire in NCCL "
    "but added after it here) or none (adds where the preset's reduction overlaps the wire; "
    "subtracts where 'none' leaves a real reduction out)",
    "DDP's first iteration (one bucket) and its bucket rebuild; memory (neither: outside the steady "
    "step)",
    "gloo sharing a CPU's cores: with `load` (measured on this machine) an all-reduce is slowed beside "
    "backward and beside another and backward beside it, at a micro-benchmark's rates, not the step's "
    "own (either way); without it only backward is slowed beside gloo (with `cores`), which leaves out "
    "time (adds: it slows the communication of fast links and small caps)",
)
WORLD_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SCALING_CAPS = (1.0, 5.0, 25.0, 100.0)


@dataclass(frozen=True)
class PredictedBucket:
    """One bucket of the predicted step (ms from the step's start)."""

    index: int
    bytes: int
    gradients: tuple[str, ...]
    ready_ms: float               # its comm hook starts
    wire_start_ms: float | None   # on the link (None: no link, or a GPU's kernel is the transfer)
    wire_end_ms: float | None
    reduce_start_ms: float        # the all-reduce (a GPU's: the kernel, the transfer in it)
    reduce_end_ms: float


@record_kind("predicted_step")
@dataclass(frozen=True)
class PredictedStep:
    """A step the model predicts, drawn like a live one (`plot_timeline`): one rank (the model
    takes ranks as alike), step 0. `config["source"]` is "model"."""

    config: dict
    learned: LearnedStep
    spans: tuple[Span, ...]
    buckets: tuple[PredictedBucket, ...]
    step_ms: float
    comm_ms: float
    exposed_comm_ms: float
    not_modelled: tuple[str, ...] = NOT_MODELLED

    @property
    def steps(self) -> list[int]:
        return [0]

    @property
    def world_size(self) -> int:
        return self.config["world_size"]

    @property
    def note(self) -> str:
        """The figure's second title line: what the model was asked, and from what."""
        link = self.config["predicted_link"]
        wire = (f"{link['gbps']:g} Gb/s, α {link['latency_us']:g} µs per "
                f"{'bucket' if self.config['wire'] == 'transfer' else 'ring message'}" if link else "no link")
        cap = self.config["bucket_cap_mb"]
        return (f"model: {self.world_size} ranks, {wire}, cap {'DDP default' if cap is None else f'{cap:g} MiB'}, "
                f"K={self.config['accum_steps']}\npredicted step {self.step_ms:.1f} ms, learned from "
                f"{self.config['learned_from']}")

    def spans_of(self, rank: int | None = None, kind: str | None = None, step: int | None = None) -> list[Span]:
        """Filter spans, as `RunRecord.spans_of` does; None means any."""
        return [s for s in self.spans if (rank is None or s.rank == rank) and (kind is None or s.kind == kind)
                and (step is None or s.step == step)]


@dataclass(frozen=True)
class _Settings:
    world_size: int
    link: Link | None
    bucket_cap_mb: float | None
    accum_steps: int
    wire: str
    compute_scale: float
    contention: float     # backward's speed while one of its rank's all-reduces is in flight
    machine: bool         # this machine's measured costs: its all-reduce, hand-overs, wire's lateness
    target: Reduction | None   # a target cluster's reduction (None: this machine's, measured)
    as_recorded: bool     # keep the recorded buckets (a trace's: its cap is unknown)
    costs: dict           # which cost came from where, as the record says it
    load: GlooLoad | None   # this machine's gloo under load at the target's world size


def _settings(learned: LearnedStep, world_size, link, bucket_cap_mb, accum_steps, wire, cores,
              reduction, compute, load) -> _Settings:
    """Every setting checked (one clear ValueError each), RECORDED ones filled in."""
    given_link = link
    world_size = learned.world_size if world_size is None else world_size
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be a whole number between 1 and {MAX_WORLD_SIZE}, got {world_size!r}")
    link = learned.link if isinstance(link, str) and link == RECORDED else as_link(link)
    if link is None and learned.device == "gpu" and world_size > 1:
        raise ValueError("a GPU trace's all-reduces need a link to cost them: pass link=... (a preset or a Link)")
    cap = learned.bucket_cap_mb if isinstance(bucket_cap_mb, str) and bucket_cap_mb == RECORDED else bucket_cap_mb
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap <= 1e6):
        raise ValueError(f"bucket_cap_mb must be a number > 0 (MiB) or None (DDP's default), got {cap!r}")
    accum = learned.accum_steps if accum_steps is None else accum_steps
    if isinstance(accum, bool) or not isinstance(accum, int) or not 1 <= accum <= 4096:
        raise ValueError(f"accum_steps must be a whole number between 1 and 4096, got {accum!r}")
    wire = learned.wire if wire is None else wire
    if wire not in WIRES:
        raise ValueError(f"wire must be one of {WIRES}, got {wire!r}")
    if isinstance(compute, bool) or not isinstance(compute, (int, float)) or not 0 < compute <= 1e3:
        raise ValueError(f"compute must be a factor > 0 on the recorded compute (0.1: ten times faster), got {compute!r}")
    replaying = isinstance(given_link, str) and given_link == RECORDED
    if reduction is None:   # this machine's measured costs only when replaying it
        reduction = RECORDED if replaying else "none"
    machine = isinstance(reduction, str) and reduction == RECORDED
    target = None if machine else as_reduction(reduction)
    as_recorded = not learned.per_gradient and isinstance(bucket_cap_mb, str) and bucket_cap_mb == RECORDED
    sharing = core_sharing(learned, world_size, cores)
    costs = cost_sources(learned, link, replaying, target, compute, sharing)
    if load is None and machine and learned.load is not None and learned.load.world_size == world_size:
        load = learned.load   # the load its all-reduce cost was learned with
    if load is not None:
        _check_load(load, learned, world_size, machine)
        costs["under load"] = (f"measured: gloo under load at {load.world_size} ranks ({load.source}): an "
                               "all-reduce beside backward, beside another, and backward beside it")
    return _Settings(world_size, link, None if cap is None else float(cap), accum, wire,
                     sharing * compute, contention(learned, world_size, cores) if machine else 1.0,
                     machine, target, as_recorded, costs, load)


def _check_load(load, learned: LearnedStep, world_size: int, machine: bool) -> None:
    """`load` must be this machine's gloo at the predicted world size, asked with its costs."""
    if not isinstance(load, GlooLoad):
        raise ValueError(f"load must be a GlooLoad (dpviz.lessons.what_if.live.measure_load), got {type(load).__name__}")
    if not machine or learned.device != "cpu":
        raise ValueError("load= is this machine's gloo under load: give it only with reduction='recorded' "
                         "on a CPU record (another cluster's collectives do not share these cores)")
    if load.world_size != world_size:
        raise ValueError(f"load was measured at {load.world_size} ranks, the prediction is for {world_size}")


def cost_sources(learned: LearnedStep, link: Link | None, replaying: bool, target: Reduction | None,
                 compute: float, sharing: float) -> dict[str, str]:
    """Which cost came from where: the link, the reduction, the compute and the hand-overs."""
    recorded = f"{learned.source} {learned.model} ({learned.device})"
    if link is None:
        wire = "no link"
    elif replaying:
        wire = f"recorded: {link.name or 'the emulated link'} of the {recorded}"
    else:
        wire = f"preset {link.name} (quoted, not measured)" if link.name else "given (typed numbers)"
    if target is None:
        reduction = (f"measured on {recorded}: the all-reduce after the last rank joined"
                     if learned.device == "cpu" else "inside the recorded kernels (the fitted link)")
        handover = "measured: this machine's hand-overs and its wire's lateness against the formula"
    else:
        reduction, handover = target.label(), "none (the link's formula alone)"
    scale = (f"recorded on {recorded}" + (f", × {compute:g} (stated factor)" if compute != 1 else "")
             + (f", × {sharing:.3g} (ranks sharing cores)" if sharing != 1 else ""))
    return {"link": wire, "reduction": reduction, "compute": scale, "hand-over": handover}


def core_sharing(learned: LearnedStep, world_size: int, cores: int | None) -> float:
    """How much slower each rank computes at `world_size` than recorded when all ranks share
    `cores` CPU cores (one intra-op thread each): max(1, N/cores) against the recorded
    max(1, N0/cores). None: compute as recorded (one device per rank, a cluster)."""
    if cores is None:
        return 1.0
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ValueError(f"cores must be a whole number >= 1 or None, got {cores!r}")
    if learned.device != "cpu":
        raise ValueError("cores= scales a CPU record's compute; a GPU trace's ranks each have a GPU")
    return max(1.0, world_size / cores) / max(1.0, learned.world_size / cores)


def contention(learned: LearnedStep, world_size: int, cores: int | None) -> float:
    """How fast a rank's backward computes while one of its all-reduces is in flight, against
    alone. On a CPU record gloo's worker reduces on the same cores: N compute threads and N
    workers share `cores`, so compute runs at min(1, C/2N) / min(1, C/N) of its speed alone
    (half once N ≥ C; measured against live runs in benchmarks/README.md, "predict_vs_live").
    1 for a GPU (NCCL's kernels have their own SMs), or with `cores` unknown (None)."""
    if cores is None or learned.device != "cpu":
        return 1.0
    return min(1.0, cores / (2 * world_size)) / min(1.0, cores / world_size)


def _uncontended(sample: StepSample, t: float, rho: float) -> float:
    """Backward time `t` (ms, hooks out) as compute alone would take it: the part of it that
    ran beside one of the rank's all-reduces ran at `rho`."""
    if rho == 1.0:
        return t
    return t - (1.0 - rho) * intersection(list(sample.shared_ms), [(0.0, t)])


def _advance(t: float, work: float, shared: list[tuple[float, float]], rho: float) -> float:
    """When `work` ms of compute started at `t` ends, if it runs at `rho` inside `shared`."""
    for a, b in union(shared) if rho != 1.0 else ():
        if b <= t:
            continue
        if a > t:
            if work <= a - t:
                return t + work
            work, t = work - (a - t), a
        if work <= (b - t) * rho:
            return t + work / rho
        work, t = work - (b - t) * rho, b
    return t + work


def predict(record: RunRecord | LearnedStep | Sequence[RunRecord | LearnedStep], *,
            world_size: int | None = None, link=RECORDED, bucket_cap_mb=RECORDED,
            accum_steps: int | None = None, wire: str | None = None, cores: int | None = None,
            reduction=None, compute: float = 1.0, load: GlooLoad | None = None) -> PredictedStep:
    """The step `record` would take at another world size, link, cap and accumulation.

    Every setting left out keeps the recorded one, so `predict(record)` replays the step.
    Several records (runs of one setting) are pooled: every rank-step of every run is
    replayed and the medians are taken over all, as `measure` pools live runs (one run's
    draw of rank skew on a busy machine then weighs as one run among them).
    `link`: a preset name, a `Link`, or None/'off' (no wire: only the recorded all-reduce
    cost). `wire`: "transfer" (α once per bucket, dpviz's emulated link: what live checks
    run on) or "ring" (α for each of the ring's 2(N−1) messages: a cluster); default: the
    recorded step's. `cores`: ranks share this many CPU cores (a CPU record's compute slows
    by max(1, N/cores) against the recorded world size's, and with this machine's costs its
    backward slows while gloo reduces beside it: `contention`). `compute`: a stated factor on
    the recorded compute (0.1: a device ten times faster). `load`: this machine's gloo under
    load at the predicted world size (`dpviz.lessons.what_if.live.measure_load`), with its
    costs only: all-reduces then progress at its measured rates beside backward and beside
    each other, and backward at its rate beside them (instead of `contention`). Default: the
    load the step was learned with (`learn(record, load=...)`), at its own world size.

    `reduction` says whose costs beyond the link's formula count. RECORDED: this machine's,
    measured (on a CPU record gloo's all-reduce on these cores, the hand-over to the wire and
    how late the wire ran against its formula): for replaying this machine. Else a target
    cluster's: a preset of `dpviz.core.link.REDUCTIONS` (a GPU reduces inside the collective at
    its memory bandwidth), a `Reduction`, or 'none' (not costed, said so), and the link's
    formula alone. Default: RECORDED when the link is the recorded one, else 'none': a
    prediction for another link never carries this machine's gloo costs unless asked.
    """
    runs = [x if isinstance(x, LearnedStep) else learn(x)
            for x in (record if isinstance(record, (list, tuple)) else [record])]
    if not runs:
        raise ValueError("predict needs a record: give a RunRecord, a LearnedStep or a list of them")
    _one_setting(runs)
    return _assemble(runs, _settings(runs[0], world_size, link, bucket_cap_mb, accum_steps, wire,
                                     cores, reduction, compute, load))


def _one_setting(runs: list[LearnedStep]) -> None:
    """Pooled runs must be runs of one setting: a clear ValueError naming what differs."""
    def setting(x: LearnedStep) -> dict:
        return {"device": x.device, "world size": x.world_size, "link": x.link, "bucket cap": x.bucket_cap_mb,
                "accum_steps": x.accum_steps, "model": x.model,
                "gradients": sorted((g.name, g.bytes) for g in x.gradients)}
    first = setting(runs[0])
    for i, run in enumerate(runs[1:], 1):
        differ = [key for key, value in setting(run).items() if value != first[key]]
        if differ:
            raise ValueError(f"pooled runs must be runs of one setting: run {i} differs from run 0 in "
                             f"{', '.join(differ)}")


def _assemble(runs: list[LearnedStep], s: _Settings) -> PredictedStep:
    """Replay every recorded step of every run, every recorded rank in it, under the new
    settings; the numbers are the medians over all rank-steps (delays on a busy machine are
    skewed: the sum of typical parts is not a typical sum), the timeline the median
    rank-step's step, every replayed rank drawn."""
    replays: list[tuple[int, _Rank]] = []
    for i, learned in enumerate(runs):
        steps: dict[int, list[StepSample]] = {}
        for sample in learned.samples:
            steps.setdefault(sample.step, []).append(sample)
        packed = ([[g] for g in range(len(learned.gradients))] if s.as_recorded else
                  assign_buckets([g.bytes for g in learned.gradients], cap_limits(s.bucket_cap_mb)))
        replays += [(i, r) for group in steps.values() for r in _replay_step(learned, group, s, packed)]
    run, middle = sorted(replays, key=lambda x: x[1].end_ms)[len(replays) // 2]
    rows = [summarize_step(r.spans, r.rank, r.step) for _, r in replays]
    drawn = sorted((r for i, r in replays if i == run and r.step == middle.step), key=lambda r: r.rank)
    learned = runs[0]
    config = {"source": "model", "world_size": s.world_size,
              "predicted_link": None if s.link is None else asdict(s.link),
              "bucket_cap_mb": s.bucket_cap_mb, "buckets": "as recorded" if s.as_recorded else "re-packed",
              "accum_steps": s.accum_steps, "wire": s.wire, "compute_scale": s.compute_scale,
              "reduction": RECORDED if s.machine else asdict(s.target), "costs": s.costs,
              "learned_from": f"{learned.source} {learned.model}, {learned.world_size} ranks"
                              + (f", {len(runs)} runs pooled" if len(runs) > 1 else ""),
              "replayed": len(replays)}
    spans = tuple(replace(sp, step=0) for r in drawn for sp in r.spans)
    return PredictedStep(config, runs[run], spans, tuple(middle.buckets),
                         statistics.median(r.end_ms for _, r in replays),
                         statistics.median(r.comm_ms for r in rows),
                         statistics.median(r.exposed_comm_ms for r in rows))


@dataclass
class _Rank:
    """One rank of a replayed step while it is assembled (ms from its step's start)."""

    sample: StepSample
    spans: list
    b0: float = 0.0
    marks: list = field(default_factory=list)        # (backward's compute ms, step clock): after each hook
    shared: list = field(default_factory=list)       # (start, end): one of its all-reduces in flight
    wire_free: float | None = None                   # its wire's last transfer ends
    ready: list = field(default_factory=list)        # per bucket: its hook starts
    wire: list = field(default_factory=list)         # per bucket: (start, end) on the link, or None
    joins: list = field(default_factory=list)        # per bucket: this rank joins the all-reduce
    end_ms: float = 0.0
    buckets: list = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.sample.rank

    @property
    def step(self) -> int:
        return self.sample.step

    def at(self, u: float, k: float, rho: float) -> float:
        """Backward's compute `u` (ms of compute alone after it starts) on this step's clock:
        from the last hook before it, at `rho` while an all-reduce was in flight."""
        before = [m for m in self.marks if m[0] <= u]
        mark_u, mark_t = before[-1] if before else self.marks[0]   # a time before backward: from its start
        return _advance(mark_t, (u - mark_u) * k, self.shared, rho)

    def backward_end(self, k: float, rho: float, after: float, hooks_ms: float) -> float:
        """At the latest, when backward ends on this step's clock: its compute left after the
        last hook at `rho` from `after` to its end (an all-reduce in flight all along), and
        `hooks_ms` of later comm hooks."""
        mark_u, mark_t = self.marks[-1]
        total = _uncontended(self.sample, self.sample.backward_ms, rho)
        return _advance(mark_t, max(0.0, total - mark_u) * k, [*self.shared, (after, math.inf)], rho) + hooks_ms

    def add(self, kind: str, tid: str, start: float, end: float, name: str, **extra) -> None:
        self.spans.append(Span(rank=self.rank, tid=tid, name=name, kind=kind, start_us=start * 1e3,
                               end_us=end * 1e3, step=self.step, **extra))


def _replay_step(learned: LearnedStep, group: list[StepSample], s: _Settings, packed) -> list[_Rank]:
    """One recorded step's ranks re-assembled: each computes and hands its buckets to its own
    wire as recorded; a bucket's all-reduce ends its cost after the last rank joined it (or
    after one of the process group's workers freed up, if later: `AT_ONCE`). With `s.load`
    an all-reduce progresses at gloo's measured rates while a rank's backward still computes
    and while another all-reduce is in flight, and backward at its measured rate beside one."""
    ranks = [_forwards(_Rank(sample, []), s) for sample in group]
    ratio = statistics.median(r.sample.reduction_ratio for r in ranks) if s.machine else 1.0
    gpu, k = learned.device == "gpu", s.compute_scale
    sizes = [sum(learned.gradients[m].bytes for m in members) for members in packed]
    rho = s.load.rates(statistics.median(sizes)).compute_beside_reduce if s.load else s.contention
    # this machine replays its gloo workers; another cluster runs NCCL, one collective at a time
    workers = Workers(AT_ONCE[learned.device] if s.machine else AT_ONCE["gpu"])
    for index, (members, size) in enumerate(zip(packed, sizes)):
        for r in ranks:   # its backward up to this bucket ran beside the earlier all-reduces
            _hand_over(learned, r, s, index, members, rho)
        # on the common clock (a rank that started its step later joins later)
        joined = workers.start(max(r.sample.offset_ms + r.joins[index] for r in ranks))
        work = _reduction_ms(learned, s, size) * ratio
        if s.load is None:
            common = joined + work
        else:
            rates = s.load.rates(size)
            later = sum(learned.hook.ms(b) for b in sizes[index + 1:]) * k
            computing = max(r.sample.offset_ms + r.backward_end(k, rho, r.joins[index], later * r.sample.hook_ratio)
                            for r in ranks)
            common = _progress(joined, work, [(computing, rates.reduce_beside_compute),
                                              (max(workers.free), rates.reduce_paired)])
        workers.take(common)
        for r in ranks:
            wire = r.wire[index]
            start = r.joins[index]
            done = common - r.sample.offset_ms                      # back on this rank's clock
            if wire and (gpu or s.wire == "ring"):   # the ring's transfer is the all-reduce
                start = wire[0]
            elif wire:                                # dpviz's emulated link, then gloo
                r.add("link", "link", *wire, f"model:link#{index}", bucket=index)
            if done > start and s.world_size > 1:
                r.add("allreduce", "all-reduce", start, done, f"model:allreduce#{index}",
                      bucket=index, bytes=size, op="all_reduce")
                r.shared.append((start, done))
            drawn = wire if wire and start != wire[0] else (None, None)
            r.buckets.append(PredictedBucket(index, size, tuple(learned.gradients[m].name for m in members),
                                             r.ready[index], *drawn, start, max(start, done)))
    for r in ranks:
        sample = r.sample
        b1 = r.at(_uncontended(sample, sample.backward_ms, rho), k, rho)
        for start, end in sample.busy_ms:   # compute as recorded, moved by the new hooks before it
            r.add("backward", "main", r.at(_uncontended(sample, start, rho), k, rho),
                  r.at(_uncontended(sample, end, rho), k, rho), "backward")
        comm_end = max((b.reduce_end_ms for b in r.buckets), default=b1)
        opt0 = max(b1, comm_end) + sample.finish_ms * k
        r.end_ms = opt0 + sample.optimizer_ms * k
        r.add("optimizer", "main", opt0, r.end_ms, "optimizer")
        r.add("step", "main", 0.0, r.end_ms, "model:step#0")
        r.spans.sort(key=lambda sp: sp.start_us)
    return ranks


def _progress(t: float, work: float, slowed: list[tuple[float, float]]) -> float:
    """When `work` ms (of an all-reduce alone) started at `t` ends, progressing at the product
    of the rates of every (until, rate) still in force."""
    while True:
        active = [(until, rate) for until, rate in slowed if until > t]
        rate = math.prod(x for _, x in active)
        edge = min((until for until, _ in active), default=math.inf)
        if work <= (edge - t) * rate:
            return t + work / rate
        work, t = work - (edge - t) * rate, edge


def _forwards(r: _Rank, s: _Settings) -> _Rank:
    """A rank's forward(s) and no-sync micro-steps, up to its synchronising backward."""
    sample, k = r.sample, s.compute_scale
    t = sample.pre_ms * k
    forwards = [sample.first_forward_ms] + [sample.forward_ms] * (s.accum_steps - 1)   # the first follows a step
    # accumulation: micro-steps that all-reduce nothing, each as it ran at the recorded K, else typical
    micros = sample.micro_ms if len(sample.micro_ms) == s.accum_steps - 1 else [
        (forward, sample.nosync_ms) for forward in forwards[:-1]]
    for micro, (forward, rest) in enumerate(micros):
        bwd_start = t + (forward + sample.gap_ms) * k
        r.add("forward", "main", t, t + forward * k, f"forward (micro-step {micro})")
        r.add("backward", "main", bwd_start, max(bwd_start, t + (forward + rest) * k),
              f"backward (micro-step {micro})")
        t += (forward + rest) * k
    r.add("forward", "main", t, t + forwards[-1] * k, "forward")
    r.b0 = t + (forwards[-1] + sample.gap_ms) * k
    r.marks.append((0.0, r.b0))
    return r


def _hand_over(learned: LearnedStep, r: _Rank, s: _Settings, index: int, members: list[int], rho: float) -> None:
    """A rank's backward up to bucket `index`, its comm hook (which pushes later gradients
    back) and its wire: everything before its all-reduce needs the other ranks."""
    sample, k = r.sample, s.compute_scale
    size = sum(learned.gradients[m].bytes for m in members)
    u = _uncontended(sample, sample.ready_ms[members[-1]], rho)
    ready = r.at(u, k, rho)
    first = index == 0 and sample.first_hook_ms is not None   # the first hook as it ran
    hook_end = ready + (sample.first_hook_ms if first else learned.hook.ms(size) * sample.hook_ratio) * k
    r.marks.append((u, hook_end))
    if learned.hook.samples:
        r.add("bucket_hook", "main", ready, hook_end, f"model:bucket#{index}", bucket=index)
    idle, busy, late = ((sample.handoff_idle_ms, sample.handoff_busy_ms, sample.wire_ratio) if s.machine
                        else (0.0, 0.0, 1.0))
    start, wire = hook_end + idle, None
    if s.link is not None and s.world_size > 1:
        if r.wire_free is not None:
            start = max(start, r.wire_free + busy)
        wire = (start, start + transfer_ms(s.link, size, s.world_size, s.wire) * late)
        r.wire_free = start = wire[1]
    r.ready.append(ready)
    r.wire.append(wire)
    r.joins.append(start)


def _reduction_ms(learned: LearnedStep, s: _Settings, nbytes: int) -> float:
    """This machine's measured all-reduce cost, its per-byte part scaled by the ring's bytes per
    rank; or the target cluster's reduction."""
    if s.world_size == 1:
        return 0.0
    if not s.machine:
        return s.target.ms(nbytes, s.world_size)
    scale = ring_factor(s.world_size) / ring_factor(learned.world_size) if learned.world_size > 1 else 1.0
    return learned.reduction.fixed_ms + learned.reduction.ms_per_mib * nbytes / MIB * scale


def describe_prediction(p: PredictedStep) -> str:
    """A few lines: the settings, the predicted step, and against the recorded one."""
    link = p.config["predicted_link"]
    wire = (f"{link['gbps']:g} Gb/s, α {link['latency_us']:g} µs ({p.config['wire']})" if link else "no link")
    m, cap = p.learned.measured, p.config["bucket_cap_mb"]
    return (f"model, learned from {p.config['learned_from']}: {p.world_size} ranks, {wire}, "
            f"cap {'DDP default' if cap is None else f'{cap:g} MiB'}, K={p.config['accum_steps']}: "
            f"{len(p.buckets)} buckets\n"
            f"predicted step {p.step_ms:.1f} ms (communication {p.comm_ms:.1f} ms, exposed {p.exposed_comm_ms:.1f} ms); "
            f"recorded step {m.step_ms:.1f} ms (exposed {m.exposed_comm_ms:.1f} ms)\n"
            + "\n".join(f"  {key}: {value}" for key, value in p.config["costs"].items()))


# --- scaling: N = 1 … 1024 ---------------------------------------------------------------

@dataclass(frozen=True)
class ScalingRow:
    world_size: int
    bucket_cap_mb: float
    step_ms: float
    exposed_comm_ms: float
    buckets: int


@record_kind("predicted_scaling")
@dataclass(frozen=True)
class Scaling:
    """Predicted step time per world size and cap on one link: the model's scaling curve."""

    config: dict               # source "model", link, wire, accum_steps, exposed_share, learned_from
    rows: tuple[ScalingRow, ...]
    not_modelled: tuple[str, ...] = NOT_MODELLED

    def best(self) -> dict[int, ScalingRow]:
        """The fastest cap's row per world size."""
        out: dict[int, ScalingRow] = {}
        for row in self.rows:
            if row.world_size not in out or row.step_ms < out[row.world_size].step_ms:
                out[row.world_size] = row
        return dict(sorted(out.items()))

    def efficiency(self) -> dict[int, float]:
        """Scaling efficiency at the best cap: the one-rank step over the N-rank step (each
        rank keeps its batch, so N ranks do N times the work in one step)."""
        best = self.best()
        one = best.get(1) or next(iter(best.values()))
        return {n: one.step_ms / row.step_ms for n, row in best.items()}

    def exposed_beyond(self) -> int | None:
        """The smallest N whose best cap still leaves more than `exposed_share` of the step
        to exposed communication (None: no N in the table does)."""
        share = self.config["exposed_share"]
        return next((n for n, r in self.best().items() if r.exposed_comm_ms > share * r.step_ms), None)


def scaling(record: RunRecord | LearnedStep, *, link, world_sizes=WORLD_SIZES, caps=SCALING_CAPS,
            wire: str = "ring", accum_steps: int | None = None, exposed_share: float = 0.1,
            reduction="none", compute: float = 1.0) -> Scaling:
    """Predicted steps for every N in `world_sizes` and cap in `caps` on `link` (a ring of
    N ranks by default: α per message, as a cluster pays it), with the target cluster's
    `reduction` and `compute` factor (`predict`: this machine's gloo costs only if asked)."""
    learned = record if isinstance(record, LearnedStep) else learn(record)
    if not 0 < exposed_share < 1:
        raise ValueError(f"exposed_share must be a fraction between 0 and 1, got {exposed_share!r}")
    if not world_sizes or not caps:
        raise ValueError("scaling needs at least one world size and one cap")
    resolved = as_link(link)
    if resolved is None:
        raise ValueError("scaling needs a link to cost the all-reduces on: a preset name, a Link or a dict")
    rows, costs = [], {}
    for n in world_sizes:
        for cap in caps:
            p = predict(learned, world_size=n, link=link, bucket_cap_mb=cap, accum_steps=accum_steps,
                        wire=wire, reduction=reduction, compute=compute)
            rows.append(ScalingRow(n, float(cap), p.step_ms, p.exposed_comm_ms, len(p.buckets)))
            costs = p.config["costs"]   # the same at every N and cap
    return Scaling({"source": "model", "link": asdict(resolved), "wire": wire, "costs": costs,
                    "accum_steps": accum_steps or learned.accum_steps, "exposed_share": exposed_share,
                    "learned_from": f"{learned.source} {learned.model}, {learned.world_size} ranks"}, tuple(rows))


def format_scaling(table: Scaling) -> str:
    """The table the CLI writes and the notebook prints: per N, the best cap's step."""
    eff, link = table.efficiency(), table.config["link"]
    lines = [f"link {link['gbps']:g} Gb/s, α {link['latency_us']:g} µs ({table.config['wire']}), "
             f"K={table.config['accum_steps']}, learned from {table.config['learned_from']} (model)",
             *(f"  {key}: {value}" for key, value in table.config.get("costs", {}).items()),
             f"{'N':>6} {'best cap MiB':>12} {'buckets':>7} {'step ms':>9} {'exposed ms':>10} {'efficiency':>10}"]
    for n, r in table.best().items():
        lines.append(f"{n:>6} {r.bucket_cap_mb:>12g} {r.buckets:>7} {r.step_ms:>9.2f} "
                     f"{r.exposed_comm_ms:>10.2f} {eff[n]:>10.0%}")
    beyond = table.exposed_beyond()
    share = table.config["exposed_share"]
    lines.append(f"exposed communication exceeds {share:.0%} of the step from N = {beyond}" if beyond else
                 f"exposed communication stays within {share:.0%} of the step up to N = {max(eff)}")
    return "\n".join(lines)


# --- the live check: predicted against measured ---------------------------------------------

@dataclass(frozen=True)
class CheckRow:
    """One grid point: predicted from another point's recorded step, and run live."""

    check: str                 # "replay" (its own step), "what-if" (another point's at the same N),
    #                            "cross-N" (another world size's, compute scaled by core sharing) or
    #                            "repeat" (no model: a run of the same point, the noise floor)
    world_size: int
    link: str                  # "1 Gb/s, α 500 µs"
    bucket_cap_mb: float | None   # None: DDP's default
    accum_steps: int
    learned_from: str          # the grid point whose step was learned from
    predicted_ms: float
    live_ms: float
    live_quartiles: tuple[float, float]
    predicted_exposed_ms: float
    live_exposed_ms: float
    compute_scale: float = 1.0

    @property
    def error(self) -> float:
        return abs(self.predicted_ms / self.live_ms - 1)

    @property
    def exposed_error(self) -> float | None:
        return abs(self.predicted_exposed_ms / self.live_exposed_ms - 1) if self.live_exposed_ms > 0 else None


@record_kind("prediction_check")
@dataclass(frozen=True)
class PredictionCheck:
    """Predictions beside live emulated-link runs over a grid (`dpviz.lessons.what_if.live`)."""

    config: dict
    rows: tuple[CheckRow, ...]
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class ErrorSummary:
    rows: int
    median: float
    worst: float
    exposed_median: float | None


def errors(check: PredictionCheck, kind: str) -> ErrorSummary | None:
    """Median and worst step-time error, and the median exposed-communication error, of one
    kind of row ("replay" or "what-if"); None if there are none."""
    rows = [r for r in check.rows if r.check == kind]
    if not rows:
        return None
    step = sorted(r.error for r in rows)
    exposed = [e for r in rows if (e := r.exposed_error) is not None]
    return ErrorSummary(len(rows), statistics.median(step), step[-1],
                        statistics.median(exposed) if exposed else None)


# A notebook's output column (JupyterLab's default page, side bar open) holds about this many
# monospace characters; a longer table row wraps onto the next line and the columns are lost.
TABLE_COLUMNS = 100
SETTINGS = ("N", "link", "cap", "K")   # a column of these that is the same in every row is said once


def format_check(check: PredictionCheck) -> str:
    """The benchmark's table: every row, then each kind's median and worst error. A setting the
    same in every row is said once above it, each point learned from once below it (by a
    letter in the rows), and every column is as wide as its widest cell: the rows fit in
    TABLE_COLUMNS where the grid varies no more than the notebook's does."""
    sources = list(dict.fromkeys(r.learned_from for r in check.rows))
    columns = [("check", [r.check for r in check.rows]), ("N", [str(r.world_size) for r in check.rows]),
               ("link", [r.link for r in check.rows]),
               ("cap", ["dflt" if r.bucket_cap_mb is None else f"{r.bucket_cap_mb:g}" for r in check.rows]),
               ("K", [str(r.accum_steps) for r in check.rows]),
               ("from", [chr(ord("a") + sources.index(r.learned_from)) for r in check.rows]),
               ("pred ms", [f"{r.predicted_ms:.1f}" for r in check.rows]),
               ("live ms", [f"{r.live_ms:.1f}" for r in check.rows]),
               ("(IQR)", [f"{r.live_quartiles[0]:.1f}-{r.live_quartiles[1]:.1f}" for r in check.rows]),
               ("err", [f"{r.error:.0%}" for r in check.rows]),
               ("exp pred", [f"{r.predicted_exposed_ms:.1f}" for r in check.rows]),
               ("exp live", [f"{r.live_exposed_ms:.1f}" for r in check.rows]),
               ("err", ["-" if (e := r.exposed_error) is None else f"{e:.0%}" for r in check.rows])]
    shared = {name: cells[0] for name, cells in columns if name in SETTINGS and check.rows and len(set(cells)) == 1}
    columns = [(name, cells) for name, cells in columns if name not in shared]
    lines = [f"every row: {', '.join(f'{name}={value}' for name, value in shared.items())}"] if shared else []
    widths = [max(map(len, [name, *cells])) for name, cells in columns]
    for row in zip(*([name, *cells] for name, cells in columns)):
        lines.append(" ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                              for i, (cell, width) in enumerate(zip(row, widths))))
    lines += [f"from {chr(ord('a') + i)}: learned from {source}" for i, source in enumerate(sources)]
    lines += check.config.get("gloo_under_load", {}).values()
    for kind in ("repeat", "replay", "what-if", "cross-N"):
        e = errors(check, kind)
        if e is not None:
            exposed = "n/a" if e.exposed_median is None else f"{e.exposed_median:.1%}"
            lines.append(f"{kind}: {e.rows} points, step-time error median {e.median:.1%}, worst {e.worst:.1%}; "
                         f"exposed-communication error median {exposed}")
    return "\n".join(lines)


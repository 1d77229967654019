# A profiled DDP run's rank side and parent side, read side by side.
"""One live DDP training run: the rank side (`train_rank`) and the parent side (`run`).

Each rank trains the workload under torch.profiler with a comm hook that records every
bucket DDP hands over, then checks the central claim outside the profiled region:
parameters are identical on all ranks and equal to one process on the concatenated batch.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import os
import time
from contextlib import nullcontext
from pathlib import Path

from .config import RunConfig, validate, writable_dir
from .launch import Cluster, RankContext, using_cluster
from .link.thread import LinkThread
from .profile_events import ScopedProfile, first_start, kineto_events, reduce_profile, scan_events
from .recompute import recompute_spans
from .rebuilt_buckets import built_with, ready_order, rebuilds_mid_run
from .record import Bucket, MicroStep, RunRecord, Span, StepCheck, save
from .trace import CLOCK_MARK, HOOK_PREFIX, LINK_ALLREDUCE_PREFIX, LINK_PREFIX, MICRO_PREFIX, STEP_PREFIX, merge_traces, \
    read_trace, shift, spans_from_trace, write_json

FACADE = ("run",)  # what `dpviz.<name>` offers from here



# --- rank side ----------------------------------------------------------------------------

class BucketLog:
    """Comm-hook state: where we are in the loop, and what DDP handed over (`seen`)."""

    def __init__(self, names_by_ptr: dict[int, str], world_size: int, link=None):
        self.names_by_ptr = names_by_ptr
        self.world_size = world_size
        self.link = link          # a LinkThread: buckets pass the emulated wire first
        self.reduce = True        # False: buckets go back unreduced (a light warm-up's, dropped)
        self.step = 0
        self.micro_step = 0
        self.seen: list[dict] = []


def _recording_allreduce(state: BucketLog, bucket):
    """DDP's default hook (average, all-reduce), plus a note and a trace span per bucket.
    With an emulated link the bucket is queued on the link thread, which all-reduces it
    after its transfer time (the hook returns at once, as DDP's own does)."""
    from torch.profiler import record_function

    buf = bucket.buffer()
    with record_function(f"{HOOK_PREFIX}{bucket.index()}"):
        buf.div_(state.world_size)
        fut = _hand_over(state, bucket.index(), buf)
    state.seen.append(dict(
        step=state.step, micro_step=state.micro_step, index=bucket.index(), numel=buf.numel(),
        bytes=buf.numel() * buf.element_size(),
        params=[state.names_by_ptr.get(p.data_ptr(), "?") for p in bucket.parameters()]))
    return fut


def _hand_over(state: BucketLog, index: int, buf):
    """A future of the reduced bucket: from the emulated link, from gloo/NCCL directly, or,
    for a light warm-up whose gradients are dropped (`warmup_step`), the bucket as it is."""
    import torch
    import torch.distributed as dist

    if not state.reduce:
        done = torch.futures.Future()
        done.set_result(buf)
        return done
    if state.link is not None:
        return state.link.send(index, buf)
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])


def record_buckets(ddp, model, world_size: int, link=None) -> BucketLog:
    """Install the recording hook on `ddp`: the returned log notes every bucket DDP hands
    over (step, micro-step, parameters), and the trace gets one span per bucket."""
    log = BucketLog({p.data_ptr(): n for n, p in model.named_parameters()}, world_size, link)
    ddp.register_comm_hook(log, _recording_allreduce)
    return log


def train_step(ctx: RankContext, cfg: RunConfig, ddp, opt, log: BucketLog, step: int,
               annotate, workload=None) -> float:
    """One optimizer step of `accum_steps` micro-steps (the run loop's own code, also run by
    the accumulation check) on `workload`'s data and loss (None: the MLP's); `annotate(name)`
    marks each micro-step. Returns the step's loss."""
    from .workloads.live import compute_loss, rank_batch

    total = 0.0
    scale = cfg.accum_steps if cfg.scale_loss else 1
    for micro in range(cfg.accum_steps):
        log.micro_step = micro
        x, y = (t.to(ctx.device) for t in rank_batch(cfg, workload, step, micro, ctx.rank))
        skip = micro < cfg.accum_steps - 1  # all but the last micro-step skip the all-reduce
        around_all = ddp.no_sync() if skip and cfg.no_sync == "forward_backward" else nullcontext()
        around_backward = ddp.no_sync() if skip and cfg.no_sync == "backward_only" else nullcontext()
        # no_sync must cover forward too: DDP decides in forward whether backward syncs
        with annotate(f"{MICRO_PREFIX}{micro}"), around_all:
            loss = compute_loss(workload, ddp(x), y) / scale
            with around_backward:
                loss.backward()
        total += loss.item() * scale / cfg.accum_steps
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total


def warmup_step(ctx: RankContext, cfg: RunConfig, ddp, opt, log: BucketLog, step: int, workload,
                kept: Kept | None = None) -> None:
    """A light warm-up (`RunConfig.warmup`): the synced forward/backward DDP records the
    gradient-ready order from, then DDP's bucket rebuild from that order, and nothing else a
    figure would see: WARMUP_SAMPLES samples per rank of a built-in model (its ready order is
    fixed by its graph), no all-reduce (the hook hands each bucket back as it is: neither the
    wire nor gloo), the gradients dropped, not applied. DDP rebuilds at the start of the next
    grad-enabled forward (`_pre_forward`); calling that same rebuild here (the broadcast of
    the bucket order included) leaves the drawn step a steady-state step, as every step after
    the rebuild is in a real job. A kept workload (`kept`) keeps the ready order the rebuild
    learned (`dpviz.rebuilt_buckets`), so its later runs need no warm-up."""
    from .config import WARMUP_SAMPLES
    from .workloads.live import BUILTIN, compute_loss, rank_batch

    log.reduce, log.micro_step = False, 0
    try:
        x, y = rank_batch(cfg, workload, step, 0, ctx.rank)
        if cfg.model in BUILTIN:
            x, y = x[:WARMUP_SAMPLES], y[:WARMUP_SAMPLES]
        loss = compute_loss(workload, ddp(x.to(ctx.device)), y.to(ctx.device))
        loss.backward()
    finally:
        log.reduce = True
    opt.zero_grad(set_to_none=True)
    if ddp.reducer._rebuild_buckets():   # what DDP's _pre_forward calls, once per training
        ddp._has_rebuilt_buckets = True   # as _pre_forward notes it
        if kept is not None:
            kept.ready = ready_order(ddp)


def train_rank(ctx: RankContext, cfg: RunConfig, search_path: list[str] = (),
               export_trace: bool = False) -> dict:
    """Train `cfg.steps` optimizer steps under the profiler; return what this rank saw.

    `search_path` is the caller's module path (a user's model imports from it).
    The profile comes back as the few events the record reads (`dpviz.profile_events`),
    not as a trace file: a knob's move skips writing and re-reading chrome JSON. The full
    chrome trace is written when `export_trace` asks for it (`run(..., out=...)`), and
    always on GPUs and with checkpointing, whose spans are read from every event.
    `parts_ms` says where the rank's time went (benchmarks/knob_latency.py prints it).
    """
    import torch

    from .workloads.live import describe_workload, flat_params, use_import_path

    t_called = time.perf_counter()
    use_import_path(list(search_path))
    device = torch.device(ctx.device)
    workload, kept = warm_workload(cfg, device)
    model = workload.model
    initial = flat_params(model).cpu() if cfg.checks else None   # the checks' starting point
    ddp, log, opt, link, steady = _wrap_ddp(ctx, cfg, model, device, kept)
    straggler = (model.register_forward_pre_hook(lambda module, inputs: time.sleep(cfg.delay_ms / 1e3))
                 if cfg.slow_rank == ctx.rank else None)   # a deliberate straggler: sleeps in its forward
    t_start = time.perf_counter()
    try:
        prof, clock, losses, snapshots, wall_ms = _train_profiled(ctx, cfg, ddp, opt, log, workload,
                                                                  export_trace, kept, steady)
    finally:   # a warm rank runs many tasks: never leave a link thread or a hook behind
        if link is not None:
            link.close()
        if straggler is not None:
            straggler.remove()
    t_trained = time.perf_counter()
    trace_path, events = _profile_output(ctx, cfg, prof, device, export_trace, log)
    del prof    # frees the profiler's events before the checks gather every step's parameters
    t_exported = time.perf_counter()
    # The checks run after profiling, so their collectives stay out of the trace.
    checks = _step_checks(ctx, cfg, workload, initial, snapshots, device)
    logging = {k: v for k, v in ddp._get_ddp_logging_data().items()
               if isinstance(v, (int, float, str, bool))}
    parts_ms = {"setup": t_start - t_called, "train": t_trained - t_start, "events": t_exported - t_trained,
                "checks": time.perf_counter() - t_exported}
    return dict(trace_path=trace_path, events=events, buckets=log.seen,
                parts_ms={k: v * 1e3 for k, v in parts_ms.items()}, losses=losses, checks=checks,
                link_events=_link_events(link, clock) if link is not None else [],
                step_wall_ms=wall_ms,
                ddp_logging=logging,
                workload=describe_workload(model, workload.name))


@dataclasses.dataclass
class Kept:
    """A built-in workload kept on a warm rank (`warm_workload`), with what later runs reuse."""

    workload: object          # a dpviz.workloads.live.Workload, its model on the rank's device
    initial: list             # its initial parameters and buffers, copied back before each run
    fingerprint: object       # `fingerprint(model)` of those, for `same_on_every_rank`
    ready: list | None = None  # its parameters in gradient-ready order, once a DDP rebuilt
    #                            (`dpviz.rebuilt_buckets`: later DDPs start with steady buckets)


# A warm rank's built-in workloads, by what builds them. A slider's moves re-run one
# workload; two entries let a notebook alternate two.
_WARM: "collections.OrderedDict[tuple, Kept]" = collections.OrderedDict()
WARM_ENTRIES, WARM_MAX_BYTES = 2, 64 << 20


def warm_workload(cfg: RunConfig, device):
    """(`build_workload(cfg)` on `device`, its `Kept` entry or None), kept on
    a warm rank for the next run of the same built-in workload, which gets it back with its
    initial weights copied in (bit for bit the weights a new build makes: the same seeded
    init, copied), no gradients, and the fingerprint computed once. Why: building and
    initialising the sweep's 1.6M-parameter MLP took ~9 ms of each slider move, and
    fingerprinting it for `same_on_every_rank` as much again.

    Kept by the fields a built-in's build reads (model, layers, width, seed, checkpoint_every;
    it is built from exactly those, so a kept one cannot differ from a fresh one), and only up
    to WARM_MAX_BYTES of parameters and buffers. A user's model is built afresh every run:
    its factory may do anything (read files, count calls, seed by rank)."""
    import torch

    from .workloads.live import BUILTIN, build_workload

    if cfg.model not in BUILTIN:
        workload = build_workload(cfg)
        return dataclasses.replace(workload, model=workload.model.to(device)), None
    key = (cfg.model, cfg.layers, cfg.width, cfg.seed, cfg.checkpoint_every, str(device))
    if key in _WARM:
        _WARM.move_to_end(key)
        kept = _WARM[key]
        with torch.no_grad():
            for tensor, start in zip(_state(kept.workload.model), kept.initial):
                tensor.copy_(start)
        for p in kept.workload.model.parameters():
            p.grad = None
        return kept.workload, kept
    workload = build_workload(RunConfig(model=cfg.model, layers=cfg.layers, width=cfg.width,
                                        seed=cfg.seed, checkpoint_every=cfg.checkpoint_every))
    workload = dataclasses.replace(workload, model=workload.model.to(device))
    initial = [t.detach().clone() for t in _state(workload.model)]
    if sum(t.numel() * t.element_size() for t in initial) > WARM_MAX_BYTES:
        return workload, None
    _WARM[key] = Kept(workload, initial, fingerprint(workload.model, device))
    while len(_WARM) > WARM_ENTRIES:
        _WARM.popitem(last=False)
    return workload, _WARM[key]


def _state(model) -> list:
    """A model's parameters and buffers, in a fixed order."""
    return [*model.parameters(), *model.buffers()]


def _wrap_ddp(ctx: RankContext, cfg: RunConfig, model, device, kept: Kept | None = None):
    """DDP around `model` with what a run records: (ddp, bucket log, SGD, link thread or None,
    whether DDP starts with steady buckets). `kept`: the model's warm-rank entry, if kept
    (its fingerprint for `same_on_every_rank`; its ready order gives a light-warm-up run
    steady buckets at once where nothing in the run would rebuild them, `rebuilt_buckets`)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    same = same_on_every_rank(model, device, kept.fingerprint if kept is not None else None)
    ready = kept.ready if kept is not None and cfg.warmup == "light" and not rebuilds_mid_run(cfg) else None
    with built_with(ready, cfg.bucket_cap_mb) as steady:
        ddp = DDP(model, bucket_cap_mb=cfg.bucket_cap_mb, init_sync=not same,
                  device_ids=[device.index] if device.type == "cuda" else None)
    ddp._set_ddp_runtime_logging_sample_rate(1)  # timing stats on every iteration
    link = LinkThread(cfg.link, ctx.world_size) if cfg.link is not None else None
    # a bare run (profile=False) is plain DDP, the overhead baseline: no hook, an empty log
    log = (record_buckets(ddp, model, ctx.world_size, link) if cfg.profile or link is not None
           else BucketLog({}, ctx.world_size))
    return ddp, log, torch.optim.SGD(ddp.parameters(), lr=cfg.lr), link, steady[0]


def same_on_every_rank(model, device, mine=None) -> bool:
    """Does every rank already hold the same parameters and buffers (shapes and bits)?

    Why ask: DDP's start-up sync checks every shape across ranks and broadcasts rank 0's
    parameters, ~10 ms of each cap-slider move (a new cap needs a new DDP) for 6 MiB that
    every rank built identically from one seed. One all-gather of a fingerprint per rank
    (per tensor: its shape, the xor of its elements' bits, `torch.hash_tensor`, and the sum
    of its 32-bit words, since the xor alone calls an even-length run of zeros equal to one
    of ones) says whether they did; a false "differ" costs only the broadcast. If any rank differs (e.g. a user's model built unseeded), DDP syncs
    as usual (`init_sync=True`) and checks the shapes itself, so every run still starts from
    rank 0's weights, and a model of other shapes still fails with DDP's own error.
    `mine`: this rank's `fingerprint(model, device)` if already known (a kept workload's)."""
    import torch
    import torch.distributed as dist

    mine = fingerprint(model, device) if mine is None else mine
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return all(torch.equal(theirs, mine) for theirs in everyone)


def fingerprint(model, device):
    """A model's parameters and buffers (shapes and bits) as 3 numbers (`same_on_every_rank`)."""
    import torch

    tensors = [t.detach() for t in (*model.parameters(), *model.buffers()) if t.numel()]
    mixed = 0   # the tensors' (shape, bits) in order, mixed into one number (fixed size to gather)
    for t in tensors:
        bits = int(torch.hash_tensor(t).item()) + int(_words(t).sum(dtype=torch.int64))
        mixed = (mixed * 1_000_003 + hash(tuple(t.shape)) + bits) % (2**61 - 1)
    return torch.tensor([len(tensors), sum(t.numel() for t in tensors), mixed], device=device)


def _words(t):
    """A tensor's bytes as 32-bit words (bytes where its size is not a multiple of 4)."""
    import torch

    raw = t.contiguous().reshape(-1).view(torch.uint8)
    return raw.view(torch.int32) if raw.numel() % 4 == 0 else raw


def _train_profiled(ctx: RankContext, cfg: RunConfig, ddp, opt, log: BucketLog, workload,
                    export_trace: bool = False, kept: Kept | None = None, steady: bool = False):
    """Every step from `cfg.profile_from` on under the profiler (none with profile=False):
    (profiler or None, the clock mark, losses, parameters after each step, each step's wall
    time in ms). Earlier steps run bare, unannotated; a light warm-up's (`warmup_step`) train
    nothing, so they add no loss and no wall time, and a DDP that starts with steady buckets
    (`steady`) skips them."""
    from torch.profiler import record_function

    from .workloads.live import flat_params

    losses, snapshots, wall_ms = [], [], []
    bare = lambda name: nullcontext()
    prof, started, clock = None, False, None if cfg.profile else _clock_mark(bare)
    try:
        for step in range(cfg.steps):
            profiled = cfg.profile and step >= cfg.profile_from
            if profiled and not started:   # built here: whether it needs shapes is known now
                prof = _profiler(ctx, cfg, needs_shapes(cfg, ddp, ctx.device, export_trace, steady),
                                 export_trace)
                prof.start()
                started, clock = True, _clock_mark(record_function)
            annotate = record_function if profiled else bare
            log.step, t0 = step, time.perf_counter()
            if cfg.warmup == "light" and step < cfg.profile_from:
                if not steady:
                    warmup_step(ctx, cfg, ddp, opt, log, step, workload, kept)
                continue
            with annotate(f"{STEP_PREFIX}{step}"):
                losses.append(train_step(ctx, cfg, ddp, opt, log, step, annotate, workload))
            wall_ms.append((time.perf_counter() - t0) * 1e3)
            if cfg.checks:
                snapshots.append(flat_params(ddp.module))
    finally:
        if started:
            prof.stop()
    return prof, clock, losses, snapshots, wall_ms


def needs_shapes(cfg: RunConfig, ddp, device: str, export_trace: bool, steady: bool = False) -> bool:
    """Does the profile starting now need the profiler's input shapes (`record_shapes`)?

    The record reads shapes for one thing: the bytes of each collective. Where the only
    collectives left in the profiled steps are the buckets' all-reduces, the hook's notes
    have their sizes (`reduce_profile` fills them in), and recording every op's shapes only
    costs: ~5 ms of profiler stop on the sliders' MLP, 7-8 on the GPT, ~1 ms of events. That
    holds on CPU for a built-in model of float32 parameters (a user's forward may run its own
    collectives), once DDP has rebuilt its buckets (the rebuild broadcasts the bucket order) or
    started with steady ones that nothing in the run rebuilds (`steady`, `dpviz.rebuilt_buckets`)
    and where it broadcasts no buffers in each forward (the CNN's BatchNorm statistics).
    A chrome trace file (`_profile_output`: the user's, a GPU's, a checkpointed run's) keeps
    every shape."""
    import torch

    from .workloads.live import BUILTIN

    writes_trace = export_trace or _full_trace(cfg, device)
    return not (not writes_trace and cfg.model in BUILTIN
                and (ddp._has_rebuilt_buckets or steady) and not (ddp.broadcast_buffers and ddp.modules_buffers)
                and all(p.dtype == torch.float32 for p in ddp.parameters()))


def _profiler(ctx: RankContext, cfg: RunConfig, record_shapes: bool, export_trace: bool):
    """The profiler `_train_profiled` starts: torch.profiler's own where a chrome trace file is
    written (`_profile_output`), else one recording only what the reduced events can hold
    (`dpviz.profile_events.ScopedProfile`)."""
    from torch.profiler import ProfilerActivity, profile

    if export_trace or _full_trace(cfg, ctx.device):
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device != "cpu" else [])
        return profile(activities=activities, record_shapes=record_shapes)
    return ScopedProfile(record_shapes)


def _full_trace(cfg: RunConfig, device: str) -> bool:
    """Are this run's spans read from its chrome trace's every event (GPU, checkpointing)?"""
    return device != "cpu" or bool(cfg.checkpoint_every)


def _profile_output(ctx: RankContext, cfg: RunConfig, prof, device, export_trace: bool,
                    log: BucketLog):
    """(chrome trace path or None, the reduced events or None) of a finished profile; a
    profile without shapes gets its all-reduces' sizes from the hook's notes (`log`)."""
    trace_path, events = None, None
    if prof is not None:
        full = _full_trace(cfg, str(device))   # spans need every event
        if export_trace or full:
            trace_path = str(Path(ctx.workdir) / f"trace-rank{ctx.rank}.json")
            prof.export_chrome_trace(trace_path)
        everything = []
        if not full:
            shapes = prof.record_shapes
            numels = None if shapes else [n["numel"] for n in log.seen if n["step"] >= cfg.profile_from]
            everything = kineto_events(prof)
            events = reduce_profile(everything, numels)
        # The profile's thousands of objects are freed once the reply is sent (~1 ms off a
        # move); a run with checks frees them at once, before the checks gather parameters.
        if not cfg.checks:
            ctx.free_after_reply(prof, everything)
    return trace_path, events


def _step_checks(ctx: RankContext, cfg: RunConfig, workload, initial, snapshots: list, device) -> list[dict]:
    """Per step, on rank 0: the largest parameter gap across ranks and to one process,
    beside the float32 rounding bound (every rank joins the all-gather)."""
    import torch
    import torch.distributed as dist

    from .rounding import max_abs, update_bound
    from .workloads.live import addition_chain, reference_kind

    if not cfg.checks:   # every rank skips the all_gather, or none does (the flag is in the config)
        return []
    mine = torch.stack(snapshots).cpu()
    everyone = [torch.empty_like(mine, device=device) for _ in range(ctx.world_size)]  # NCCL gathers into GPU tensors
    dist.all_gather(everyone, mine.to(device) if ctx.backend == "nccl" else mine)
    if ctx.rank != 0:
        return []
    reference = _reference(cfg.replace(bucket_cap_mb=None, profile=True))
    param_max, sums = max_abs([initial, *reference]), addition_chain(cfg, workload)
    max_update = max_abs(b - a for a, b in zip([initial, *reference], reference))  # lr·max|g|
    return [dict(step=step,
                 max_diff_across_ranks=max(float((e[step].cpu() - mine[step]).abs().max()) for e in everyone),
                 max_diff_vs_single_process=float((reference[step] - mine[step]).abs().max()),
                 rounding_bound=update_bound(sums, max_update, param_max, step + 1),
                 reference=reference_kind(workload.model))
            for step in range(cfg.steps)]


def _clock_mark(annotate) -> float:
    """perf_counter (s) at a `CLOCK_MARK` annotation: ties Python's clock to the trace's."""
    before = time.perf_counter()
    with annotate(CLOCK_MARK):
        after = time.perf_counter()
    return (before + after) / 2


def _link_events(link, clock_s: float) -> list[dict]:
    """The link thread's transfers as chrome trace events, on perf_counter microseconds
    relative to the clock mark (`assemble_run` moves them onto the trace's clock). The profiler
    does not see annotations made on a Python thread, so the link keeps its own times; those
    of steps run before the profiler started (`profile_from`, the clock mark) are left out."""
    transfers = [{"ph": "X", "cat": "user_annotation", "name": f"{LINK_PREFIX}{index}",
                  "tid": "dpviz link", "ts": (start - clock_s) * 1e6, "dur": (end - start) * 1e6,
                  "args": {"link": dataclasses.asdict(link.link)}}
                 for index, start, end in link.spans if start >= clock_s]
    reduces = [{"ph": "X", "cat": "user_annotation", "name": f"{LINK_ALLREDUCE_PREFIX}{index}",
                "tid": "dpviz link all-reduce", "ts": (start - clock_s) * 1e6,
                "dur": (end - start) * 1e6, "args": {"Input Dims": [[numel]], "Input type": ["float"]}}
               for index, numel, start, end in link.reduces if start >= clock_s]
    return transfers + reduces


@functools.lru_cache(maxsize=4)
def _reference(cfg: RunConfig) -> list:
    """One process on the concatenated batches, kept per rank process: the reference does
    not depend on how DDP communicates (bucket cap, profiler), so a knob over those reuses
    it instead of training a second model on every move."""
    from .workloads.live import single_process_params

    return single_process_params(cfg)


# --- parent side --------------------------------------------------------------------------

def run(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
        out: str | os.PathLike | None = None, **changes) -> RunRecord:
    """Run the DDP workload live and return its record; `out` also writes the files.

    Pass a warm `cluster` to re-run in a fraction of a cold start; without one, ranks are
    started for this run and stopped after it. Keyword `changes` override config fields.
    """
    from .workloads.live import import_path, validate_model_spec

    cfg = validate(cfg or RunConfig())
    if changes:
        cfg = cfg.replace(**changes)
    validate_model_spec(cfg.model, seed=cfg.seed)   # a user's model fails here, before any rank
    out_dir = writable_dir(out) if out is not None else None
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s, exact=True) as ranks:
        results = ranks.run_task(train_rank, cfg, import_path(), out_dir is not None, timeout_s=cfg.timeout_s)
        return assemble_run(cfg, results, out_dir)   # the traces live in the ranks' workdir


def assemble_run(cfg: RunConfig, results: list[dict], out_dir: Path | None = None) -> RunRecord:
    """Turn per-rank results and their profiles into one record (and files, with `out_dir`).

    Spans come from a rank's reduced events when it sent them, else from its trace file."""
    files = {r: _with_link(read_trace(res["trace_path"]), res.get("link_events", []))
             for r, res in enumerate(results) if res["trace_path"]}
    reduced = {r: res["events"] for r, res in enumerate(results) if res.get("events") is not None}
    origin = first_start(reduced.values())
    spans = [s for r in sorted({*files, *reduced})
             for s in (_reduced_spans(reduced[r], origin, results[r].get("link_events", []), r)
                       if r in reduced else rank_spans(cfg, files[r], r))]
    steps = [s.start_us for s in spans if s.kind == "step"]
    spans = shift(spans, min(steps)) if steps else spans
    record = RunRecord(
        config=cfg.to_dict(), world_size=cfg.world_size,
        spans=tuple(sorted(spans, key=lambda s: (s.rank, s.start_us))),
        buckets=tuple(_buckets(results, spans, cfg.profile_from)),
        micro_steps=tuple(_micro_steps(spans)),
        losses={r: tuple(res["losses"]) for r, res in enumerate(results)},
        checks=tuple(StepCheck(**c) for c in results[0]["checks"]),
        ddp_logging={r: res["ddp_logging"] for r, res in enumerate(results)},
        step_wall_ms={r: tuple(res["step_wall_ms"]) for r, res in enumerate(results)},
        param_names=results[0]["workload"].param_names(),
        param_bytes=tuple(p.bytes for p in results[0]["workload"].params),
        workload=results[0]["workload"])
    if out_dir is not None:
        for rank, trace in files.items():
            write_json(trace, out_dir / f"trace-rank{rank}.json")
        write_json(merge_traces(files), out_dir / "trace-merged.json")
        save(record, out_dir / "record.json")
    for res in results:
        if res["trace_path"]:
            Path(res["trace_path"]).unlink(missing_ok=True)
    return record


def _with_link(trace: dict, link_events: list[dict]) -> dict:
    """Add the link thread's transfers to a rank's trace (`_on_trace_clock`)."""
    if link_events:
        mark = next(ev for ev in trace["traceEvents"]
                    if isinstance(ev, dict) and ev.get("name") == CLOCK_MARK)
        pid = mark.get("pid", 0)
        trace["traceEvents"] += [{**ev, "pid": pid} for ev in
                                 _on_trace_clock(link_events, mark["ts"] + mark.get("dur", 0) / 2)]
    return trace


def _reduced_spans(events: list, origin_ns: int, link_events: list[dict], rank: int) -> list[Span]:
    """One rank's spans from its reduced events (`dpviz.profile_events`) and the link
    thread's transfers (`_on_trace_clock`): a profile is reduced only where no recomputed
    forward is to be found (`_profile_output`)."""
    scan, mark = scan_events(events, origin_ns)
    for ev in _on_trace_clock(link_events, mark):
        scan.add(ev)
    return scan.spans(rank)


def _on_trace_clock(link_events: list[dict], mark_us: float) -> list[dict]:
    """The link thread's transfers moved onto a trace's clock by the middle of its clock
    mark (`mark_us`: the same instant on both clocks, to within the annotation's few µs)."""
    return [{**ev, "ts": ev["ts"] + mark_us} for ev in link_events]


def rank_spans(cfg: RunConfig, trace: dict, rank: int) -> list[Span]:
    """One rank's spans from its trace, with recomputed forwards when checkpointing."""
    spans = spans_from_trace(trace, rank)
    return spans + _recompute(trace, rank, spans) if cfg.checkpoint_every else spans


def _recompute(trace: dict, rank: int, spans: list[Span]) -> list[Span]:
    """Recomputed forwards inside backward: found by nesting, which no event name tells."""
    main = next(s.tid for s in spans if s.rank == rank and s.kind == "forward")
    windows = [s for s in spans if s.rank == rank and s.kind == "step"]
    return [Span(rank=rank, tid=main, name="recompute", kind="recompute", start_us=a, end_us=b,
                 step=next((w.step for w in windows if w.start_us <= a < w.end_us), None))
            for a, b in recompute_spans(trace, forward_mark="DistributedDataParallel.forward")]


def _buckets(results: list[dict], spans: list[Span], profile_from: int = 0) -> list[Bucket]:
    """The hook's notes of the profiled steps, timed by their trace spans (the k-th call is
    the k-th span)."""
    out = []
    for rank, res in enumerate(results):
        hooks = sorted((s for s in spans if s.rank == rank and s.kind == "bucket_hook"),
                       key=lambda s: s.start_us)
        for seen, span in zip((n for n in res["buckets"] if n["step"] >= profile_from), hooks):
            out.append(Bucket(rank=rank, step=seen["step"], micro_step=seen["micro_step"],
                              index=seen["index"], numel=seen["numel"], bytes=seen["bytes"],
                              params=tuple(seen["params"]), hook_us=span.start_us))
    return out


def _micro_steps(spans: list[Span], rank: int = 0) -> list[MicroStep]:
    """Each micro-step of one rank with the all-reduces launched inside it (from its trace).
    With an emulated link the link thread launches them, unseen by the profiler: there each
    bucket's transfer, which starts inside the micro-step that handed it over, counts."""
    launches = [s for s in spans if s.rank == rank and s.kind in ("allreduce_launch", "link")]
    out = []
    for m in sorted((s for s in spans if s.rank == rank and s.kind == "micro_step"),
                    key=lambda s: s.start_us):
        count = sum(m.start_us <= s.start_us < m.end_us for s in launches)
        out.append(MicroStep(step=m.step, micro_step=int(m.name[len(MICRO_PREFIX):]),
                             all_reduces=count, start_us=m.start_us, end_us=m.end_us))
    return out

"""One live DDP training run: the rank side (`train_rank`) and the parent side (`run`).

Each rank trains the workload under torch.profiler with a comm hook that records every
bucket DDP hands over, then checks the central claim outside the profiled region:
parameters are identical on all ranks and equal to one process on the concatenated batch.
"""
from __future__ import annotations

import dataclasses
import os
import time
from contextlib import nullcontext

from dpviz.analysis.scan import HOOK_PREFIX, MICRO_PREFIX, STEP_PREFIX
from dpviz.core.config import RunConfig, validate, writable_dir
from dpviz.core.record import RunRecord
from dpviz.engine.assemble import assemble_run
from dpviz.engine.checks import step_checks
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.engine.link_thread import LinkThread
from dpviz.engine.profile_events import clock_mark, profile_output, profiler, records_shapes
from dpviz.engine.torch_gate import ddp_logging_data, log_every_iteration
from dpviz.engine.warm_ranks import (
    Kept, build_ddp, rebuilds_mid_run, same_on_every_rank, warm_workload, warmup_step,
)

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
        self.in_flight: list = []  # this step's all-reduce Work handles, until `settle`

    def settle(self) -> None:
        """Wait until every all-reduce this step issued has ended its profiler event.

        gloo's worker thread completes a collective's future first and records the end of
        its `gloo:all_reduce` event after, so backward can return, and a profiler stop,
        before the last bucket's event has ended: that event is then missing from the
        profile. `Work.wait()` returns only after the worker has finished the work, end
        event included; DDP already waited on the futures, so this waits only for that end."""
        for work in self.in_flight:
            work.wait()
        self.in_flight.clear()


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
    work = dist.all_reduce(buf, async_op=True)
    state.in_flight.append(work)
    return work.get_future().then(lambda f: f.value()[0])


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
    from dpviz.engine.workloads import compute_loss, rank_batch

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
    log.settle()
    return total


def train_rank(ctx: RankContext, cfg: RunConfig, search_path: list[str] = (),
               export_trace: bool = False) -> dict:
    """Train `cfg.steps` optimizer steps under the profiler; return what this rank saw.

    `search_path` is the caller's module path (a user's model imports from it). The profile comes
    back as the few events the record reads; a chrome trace is written where `export_trace` asks."""
    import torch

    from dpviz.engine.workloads import describe_workload, flat_params, use_import_path

    parts = Parts()
    use_import_path(list(search_path))
    device = torch.device(ctx.device)
    workload, kept = warm_workload(cfg, device)
    initial = flat_params(workload.model).cpu() if cfg.checks else None   # the checks' start
    wrapped = wrap_ddp(ctx, cfg, workload.model, device, kept)
    parts.mark("setup")
    trained = train_profiled(ctx, cfg, wrapped, workload, export_trace, kept)
    parts.mark("train")
    trace_path, events = profile_output(ctx, cfg, trained.prof, device, export_trace, wrapped.log)
    trained.prof = None   # freed before the checks gather every step's parameters
    parts.mark("events")
    checks = step_checks(ctx, cfg, workload, initial, trained.snapshots, device)  # out of the trace
    parts.mark("checks")
    return dict(trace_path=trace_path, events=events, buckets=wrapped.log.seen, parts_ms=parts.ms,
                losses=trained.losses, checks=checks, step_wall_ms=trained.wall_ms,
                link_events=wrapped.link.trace_events(trained.clock_s) if wrapped.link else [],
                ddp_logging=ddp_logging_data(wrapped.ddp),
                workload=describe_workload(workload.model, workload.name))


class Parts:
    """Where a rank's time went, in ms (benchmarks/knob_latency.py prints it): `mark(name)`
    books the time since the last mark under `name`."""

    def __init__(self):
        self.ms: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.ms[name], self._last = (now - self._last) * 1e3, now


@dataclasses.dataclass
class Wrapped:
    """DDP around a rank's model, with what a run records."""

    ddp: object
    log: BucketLog
    opt: object                # SGD on the DDP's parameters
    link: LinkThread | None    # the emulated wire buckets cross first, if any
    steady: bool               # DDP starts with the buckets its rebuild would make (`warm_ranks.build_ddp`)


def wrap_ddp(ctx: RankContext, cfg: RunConfig, model, device, kept: Kept | None = None) -> Wrapped:
    """DDP around `model`. A plain run builds it as anyone would, its start-up broadcast of
    rank 0's weights included; a slider's light run (`warmup == "light"`) skips what a warm
    rank already knows (`dpviz.engine.warm_ranks`: the sync where every rank holds the same weights,
    the warm-up where the kept workload's ready order gives steady buckets)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    light = cfg.warmup == "light"
    init_sync = not (light and same_on_every_rank(model, device, kept.fingerprint if kept else None))
    ready = kept.ready if light and kept is not None and not rebuilds_mid_run(cfg) else None
    ddp, steady = build_ddp(lambda: DDP(model, bucket_cap_mb=cfg.bucket_cap_mb, init_sync=init_sync,
                                        device_ids=[device.index] if device.type == "cuda" else None),
                            ready, cfg.bucket_cap_mb)
    log_every_iteration(ddp)
    link = LinkThread(cfg.link, ctx.world_size) if cfg.link is not None else None
    # a bare run (profile=False) is plain DDP, the overhead baseline: no hook, an empty log
    log = (record_buckets(ddp, model, ctx.world_size, link) if cfg.profile or link is not None
           else BucketLog({}, ctx.world_size))
    return Wrapped(ddp, log, torch.optim.SGD(ddp.parameters(), lr=cfg.lr), link, steady)


@dataclasses.dataclass
class Trained:
    """What `train_profiled` leaves."""

    prof: object | None        # the stopped profiler (None with profile=False)
    clock_s: float | None      # perf_counter at the clock mark: the trace's clock in Python's
    losses: list[float]
    snapshots: list            # parameters after each step, for the checks
    wall_ms: list[float]       # each trained step's wall time


def train_profiled(ctx: RankContext, cfg: RunConfig, wrapped: Wrapped, workload,
                   export_trace: bool = False, kept: Kept | None = None) -> Trained:
    """Every step from `cfg.profile_from` on under the profiler (none with profile=False).
    Earlier steps run bare, unannotated; a light warm-up's (`warm_ranks.warmup_step`) train
    nothing, so they add no loss and no wall time, and a DDP that starts with steady buckets
    skips them. A deliberate straggler (`cfg.slow_rank`) sleeps in its every forward."""
    from torch.profiler import record_function

    from dpviz.engine.workloads import flat_params

    ddp, log = wrapped.ddp, wrapped.log
    done = Trained(None, None if cfg.profile else clock_mark(_bare), [], [], [])
    straggler = (ddp.module.register_forward_pre_hook(lambda module, inputs: time.sleep(cfg.delay_ms / 1e3))
                 if cfg.slow_rank == ctx.rank else None)
    try:
        for step in range(cfg.steps):
            profiled = cfg.profile and step >= cfg.profile_from
            if profiled and done.prof is None:   # built here: whether it needs shapes is known now
                shapes = records_shapes(cfg, ddp, ctx.device, export_trace, wrapped.steady)
                done.prof = profiler(ctx, shapes)
                done.prof.start()
                done.clock_s = clock_mark(record_function)
            annotate = record_function if profiled else _bare
            log.step, t0 = step, time.perf_counter()
            if cfg.warmup == "light" and step < cfg.profile_from:
                if not wrapped.steady:
                    warmup_step(ctx, cfg, ddp, wrapped.opt, log, step, workload, kept)
                continue
            with annotate(f"{STEP_PREFIX}{step}"):
                done.losses.append(train_step(ctx, cfg, ddp, wrapped.opt, log, step, annotate, workload))
            done.wall_ms.append((time.perf_counter() - t0) * 1e3)
            if cfg.checks:
                done.snapshots.append(flat_params(ddp.module))
    finally:   # a warm rank runs many tasks: never leave a profiler, link thread or hook behind
        if done.prof is not None:
            done.prof.stop()
        if wrapped.link is not None:
            wrapped.link.close()
        if straggler is not None:
            straggler.remove()
    return done


def _bare(name: str):
    return nullcontext()


# --- parent side --------------------------------------------------------------------------

def run(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
        out: str | os.PathLike | None = None, **changes) -> RunRecord:
    """Run the DDP workload live and return its record; `out` also writes the files.

    Pass a warm `cluster` to re-run in a fraction of a cold start; without one, ranks are
    started for this run and stopped after it. Keyword `changes` override config fields.
    """
    from dpviz.engine.workloads import import_path, validate_model_spec

    cfg = validate(cfg or RunConfig())
    if changes:
        cfg = cfg.replace(**changes)
    validate_model_spec(cfg.model, seed=cfg.seed)   # a user's model fails here, before any rank
    out_dir = writable_dir(out) if out is not None else None
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s, exact=True,
                       device=cfg.device) as ranks:
        results = ranks.run_task(train_rank, cfg, import_path(), out_dir is not None, timeout_s=cfg.timeout_s)
        return assemble_run(cfg, results, out_dir)   # the traces live in the ranks' workdir



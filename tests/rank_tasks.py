"""Rank functions for the launcher's tests: they must be importable by spawned ranks."""
from __future__ import annotations

import os
import time


def whoami(ctx) -> dict:
    return {"rank": ctx.rank, "world_size": ctx.world_size, "pid": os.getpid()}


def all_reduce_rank_ids(ctx) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(ctx.rank)])
    dist.all_reduce(t)
    return float(t.item())


def raise_on(ctx, bad_rank: int) -> int:
    if ctx.rank == bad_rank:
        raise ValueError(f"deliberate failure on rank {ctx.rank}")
    return ctx.rank


def die_on(ctx, bad_rank: int) -> int:
    if ctx.rank == bad_rank:
        os._exit(7)
    return ctx.rank


def hang_in_collective_on(ctx, bad_rank: int) -> float:
    """`bad_rank` never joins the all-reduce the others wait in."""
    if ctx.rank == bad_rank:
        time.sleep(3600)
    return all_reduce_rank_ids(ctx)


def report_pid_then_wait_in_collective(ctx, pid_file: str) -> float:
    """Every rank writes its pid, then all wait in an all-reduce that rank 1 never joins."""
    with open(f"{pid_file}.{ctx.rank}", "w") as f:
        f.write(str(os.getpid()))
    return hang_in_collective_on(ctx, 1)


def fsdp2_trace(ctx, out_dir: str, steps: int = 2) -> str:
    """Train dpviz's MLP under FSDP2 (fully_shard per Linear, as dpviz.lessons.zero.live does) with the
    profiler on; write this rank's chrome trace into `out_dir`, as a user's job would."""
    from pathlib import Path

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from dpviz.core.config import RunConfig
    from dpviz.analysis.scan import STEP_PREFIX
    from dpviz.engine.workloads import build_mlp, loss_fn, rank_batch
    from dpviz.lessons.zero.live import _wrap

    cfg = RunConfig(world_size=ctx.world_size, steps=steps)
    module, opt = _wrap(build_mlp(cfg), "fsdp", dist.group.WORLD)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for step in range(steps):
            with record_function(f"{STEP_PREFIX}{step}"):
                x, y = rank_batch(cfg, None, step, 0, ctx.rank)
                loss_fn(module(x), y).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
    path = Path(out_dir) / f"fsdp-rank{ctx.rank}.json"
    prof.export_chrome_trace(str(path))
    return str(path)


def profile_and_warn(ctx, fail_rank: int) -> int:
    """Start and stop torch.profiler (kineto logs its USDT lines to fd 2), write a real warning
    to fd 2 as C++ code would, and on `fail_rank` also Python last words, then raise."""
    import sys

    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):
        torch.ones(4).sum()
    os.write(2, f"rank {ctx.rank}: a real warning on fd 2\n".encode())
    if ctx.rank == fail_rank:
        print(f"rank {ctx.rank}: last words before the failure", file=sys.stderr, flush=True)
        raise RuntimeError(f"deliberate failure on rank {ctx.rank}")
    return ctx.rank


def crash_loudly_on(ctx, bad_rank: int) -> int:
    """`bad_rank` writes a fatal error to fd 2 without a newline at the end, then dies."""
    if ctx.rank == bad_rank:
        os.write(2, f"Fatal Python error: rank {ctx.rank} simulated a crash".encode())
        os._exit(9)
    return ctx.rank


def start_agreement(ctx, seed_by_rank: bool, bias_by_rank: bool = False) -> dict:
    """dpviz's MLP built from one seed (or one per rank, or one seed but a bias set per rank):
    does `same_on_every_rank` say they
    match, and what does rank 1 hold after DDP's construction as a slider's light run does it?"""
    from dpviz.core.config import RunConfig, for_slider
    from dpviz.engine.ddp_run import wrap_ddp
    from dpviz.engine.warm_ranks import same_on_every_rank
    from dpviz.engine.workloads import build_mlp, flat_params

    cfg = for_slider(RunConfig(layers=2, width=16, seed=ctx.rank if seed_by_rank else 0))
    model = build_mlp(cfg)
    if bias_by_rank:   # one bias of 16 (even) elements: rank 0 all zeros, rank 1 all ones
        with __import__("torch").no_grad():
            model.blocks[0][0].bias.fill_(float(ctx.rank))
    same = same_on_every_rank(model, "cpu")
    ddp = wrap_ddp(ctx, cfg, model, __import__("torch").device("cpu")).ddp
    return {"same": same, "after": flat_params(ddp.module).tolist(),
            "rank0_seed_weights": flat_params(build_mlp(cfg.replace(seed=0))).tolist()}


def warm_workload_after_training(ctx, cfg) -> dict:
    """The kept workload after its weights, buffers and gradients were changed: is it back to
    what a fresh build makes, bit for bit, with a fresh build's fingerprint, and the same
    object (kept) or not (a user's)?"""
    import torch

    from dpviz.engine.warm_ranks import fingerprint, warm_workload
    from dpviz.engine.workloads import build_workload

    first, known = warm_workload(cfg, torch.device("cpu"))
    with torch.no_grad():
        for t in (*first.model.parameters(), *first.model.buffers()):
            t.add_(1)
    for p in first.model.parameters():
        p.grad = torch.ones_like(p)
    again, known_again = warm_workload(cfg, torch.device("cpu"))
    fresh = build_workload(cfg).model
    same_print = known_again is not None and torch.equal(known_again.fingerprint, fingerprint(fresh, "cpu"))
    pairs = zip((*again.model.parameters(), *again.model.buffers()),
                (*fresh.parameters(), *fresh.buffers()))
    return dict(kept=again is first, equal=all(torch.equal(a, b) for a, b in pairs),
                no_grads=all(p.grad is None for p in again.model.parameters()), same_print=same_print)


def averaging_measures_both_ways(ctx) -> dict:
    """compare_averaging's measurement of a step from the gathered rows of several steps, and
    as all-reduces of that step compute it."""
    import torch
    import torch.distributed as dist

    from dpviz.lessons.averaging.live import _gathered, _measured

    params = torch.randn(4099, generator=torch.Generator().manual_seed(ctx.rank))
    loss = torch.tensor(0.25 + ctx.rank / 3)
    rows = [torch.zeros(4100), torch.cat([params, loss.reshape(1)])]
    drift, mean, mean_loss = _measured(_gathered(rows, ctx.world_size)[1], ctx.world_size)
    reduced = params.clone()
    dist.all_reduce(reduced)
    reduced /= ctx.world_size
    sq = ((params - reduced) ** 2).sum()
    dist.all_reduce(sq)
    total = loss.clone()
    dist.all_reduce(total)
    return dict(gathered=(drift, mean.tolist(), mean_loss),
                reduced=(float(torch.sqrt(sq / ctx.world_size)), reduced.tolist(),
                         float(total) / ctx.world_size))


def averaging_gathered_step_by_step(ctx, cfg) -> bool:
    """compare_averaging's rank run with its measurement gathered once, and one step at a time
    (GATHER_FLOATS too small for two steps): the same record?"""
    from dpviz.lessons.averaging import live as averaging

    once = averaging.averaging_rank(ctx, cfg, "parameter", 3, 7)
    kept, averaging.GATHER_FLOATS = averaging.GATHER_FLOATS, 1
    try:
        return averaging.averaging_rank(ctx, cfg, "parameter", 3, 7) == once
    finally:
        averaging.GATHER_FLOATS = kept


def train_rank_with_shapes(ctx, cfg) -> dict:
    """`train_rank` with the profiler's shapes recorded whatever `records_shapes` decides (the
    record a run made before shapes could be left out), for comparison with a run's own."""
    from dpviz.engine import ddp_run

    decide = ddp_run.records_shapes
    ddp_run.records_shapes = lambda *args: True
    try:
        return ddp_run.train_rank(ctx, cfg)
    finally:
        ddp_run.records_shapes = decide


def shapes_recorded(ctx, cfg) -> bool:
    """Whether `train_rank`'s profile of `cfg` recorded shapes (`records_shapes`' decision)."""
    from dpviz.engine import ddp_run

    seen = []
    decide = ddp_run.records_shapes
    ddp_run.records_shapes = lambda *args: seen.append(decide(*args)) or seen[-1]
    try:
        ddp_run.train_rank(ctx, cfg)
    finally:
        ddp_run.records_shapes = decide
    return seen == [True]


def construction_broadcasts(ctx, cfg) -> int:
    """How many broadcasts of module states DDP's construction made in `wrap_ddp` for `cfg`
    (its start-up sync), on this rank's kept or fresh workload."""
    import torch
    import torch.distributed as dist

    from dpviz.engine.ddp_run import wrap_ddp
    from dpviz.engine.warm_ranks import warm_workload

    calls, real = [], dist._broadcast_coalesced
    dist._broadcast_coalesced = lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs)
    try:
        workload, kept = warm_workload(cfg, torch.device("cpu"))
        wrapped = wrap_ddp(ctx, cfg, workload.model, torch.device("cpu"), kept)
    finally:
        dist._broadcast_coalesced = real
    if wrapped.link is not None:
        wrapped.link.close()
    return len(calls)


def steady_buckets_against_rebuilds(ctx, model: str, caps: list) -> list[tuple]:
    """Per cap: (the buckets DDP's own rebuild made after a synced backward, the ones
    `steady_assignment` gives from the ready order learned at the first cap), as parameter
    indices per bucket, in the reducer's order."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import torch.distributed as dist

    from dpviz.core.config import RunConfig
    from dpviz.engine.torch_gate import ready_order
    from dpviz.engine.warm_ranks import steady_assignment
    from dpviz.engine.workloads import build_workload, compute_loss, rank_batch

    cfg = RunConfig(model=model, world_size=ctx.world_size)
    workload = build_workload(cfg)
    params = list(workload.model.parameters())
    index = {id(p): i for i, p in enumerate(params)}
    ready, out = None, []
    for cap in caps:
        ddp = DDP(workload.model, bucket_cap_mb=cap)
        x, y = rank_batch(cfg, workload, 0, 0, ctx.rank)
        compute_loss(workload, ddp(x), y).backward()
        assert ddp.reducer._rebuild_buckets()
        ready = ready or ready_order(ddp)
        rebuilt = [[index[id(p)] for p in b.parameters()] for b in ddp.reducer._get_zeros_like_grad_buckets()]
        out.append((rebuilt, steady_assignment(params, ready, cap, dist._compute_bucket_assignment_by_size)[0]))
        workload.model.zero_grad(set_to_none=True)
        del ddp
    return out


class _Marked:
    """An object that notes in DROPPED when it is freed."""

    def __init__(self, name: str):
        self.name = name

    def __del__(self):
        DROPPED.append(self.name)


DROPPED: list[str] = []


def hold_until_replied(ctx, name: str) -> bool:
    """Asks to free an object after its reply, drops its own reference: is it still alive?"""
    import gc

    ctx.free_after_reply(_Marked(name))
    gc.collect()
    return name not in DROPPED


def dropped(ctx) -> list[str]:
    return list(DROPPED)


def gather_scatter_by_both_names(ctx) -> dict:
    """All-gather and reduce-scatter through the torch gate, with this torch's names and as a
    torch that has only the older ones (`all_gather_into_tensor`, `reduce_scatter_tensor`)."""
    import types
    import warnings

    import torch
    import torch.distributed as dist

    from dpviz.engine.torch_gate import all_gather_single, reduce_scatter_single

    older = types.SimpleNamespace(all_gather_into_tensor=dist.all_gather_into_tensor,
                                  reduce_scatter_tensor=dist.reduce_scatter_tensor)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # the older names, deprecated here
        for name, names in (("newer", dist), ("older", older)):
            gathered, scattered = torch.empty(2 * ctx.world_size), torch.empty(2)
            all_gather_single(names)(gathered, torch.full((2,), float(ctx.rank)))
            reduce_scatter_single(names)(scattered, torch.arange(2.0 * ctx.world_size))
            out[name] = (gathered.tolist(), scattered.tolist())
    return out



def all_reduces_profiled_per_step(ctx, steps: int) -> dict:
    """Each of `steps` training steps under its own profiler, stopped as soon as the step
    returns: how many buckets the hook handed over and how many `gloo:all_reduce` events
    the profile holds, per step, and how many all-reduces the log still holds in flight."""
    from contextlib import nullcontext

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile

    from dpviz.core.config import RunConfig
    from dpviz.engine.ddp_run import record_buckets, train_step
    from dpviz.engine.workloads import build_mlp

    cfg = RunConfig(world_size=ctx.world_size, bucket_cap_mb=0.002)
    model = build_mlp(cfg)
    ddp = DDP(model, bucket_cap_mb=cfg.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
    log = record_buckets(ddp, model, ctx.world_size)
    train_step(ctx, cfg, ddp, opt, log, 0, lambda name: nullcontext())   # one bucket; DDP rebuilds after
    counts = []
    for step in range(1, steps + 1):
        before = len(log.seen)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            train_step(ctx, cfg, ddp, opt, log, step, lambda name: nullcontext())
        recorded = sum(e.name == "gloo:all_reduce" for e in prof.events())
        counts.append((len(log.seen) - before, recorded))
    return {"counts": counts, "in_flight": len(log.in_flight)}


def link_transfers_while_its_thread_is_held(ctx, held_ms: float) -> tuple[list, float, list]:
    """Hand two buckets to the emulated wire, then keep the GIL for `held_ms` (a long switch
    interval and pure-Python work: the wire's thread cannot run), as a busy core keeps it
    from waking. Returns each transfer's (start, end) and each all-reduce's issue, ms from
    the first hand-over, and the held ms."""
    import sys

    import torch

    from dpviz.core.link import Link
    from dpviz.engine.link_thread import LinkThread

    wire = LinkThread(Link(gbps=10.0, latency_us=10_000.0), ctx.world_size)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    try:
        handed = time.perf_counter()
        futures = [wire.send(i, torch.ones(256)) for i in range(2)]
        while time.perf_counter() - handed < held_ms / 1e3:
            pass
        held = (time.perf_counter() - handed) * 1e3
    finally:
        sys.setswitchinterval(interval)
    for future in futures:
        future.wait()
    wire.close()
    transfers = [((start - handed) * 1e3, (end - handed) * 1e3) for _, start, end in wire.spans]
    return transfers, held, [(issued - handed) * 1e3 for _, _, issued, _ in wire.reduces]


def fsdp_kept_against_fresh(ctx, cfg, knobs) -> dict:
    """A light FSDP run (a knob's move) on a model built afresh, then the same run again: does
    the second reuse the first's sharded model, and, restored to its state after the warm-up,
    train the same parameters and Adam state bit for bit? (`trained`: the restore had work to
    do: the first run's step moved the state on from the kept copy.)"""
    import torch

    from dpviz.lessons.fsdp.live import fsdp_rank, kept, training_state

    runs = []
    for _ in range(2):
        reused = fsdp_rank(ctx, cfg, knobs, False)["reused"]
        sharded = kept(cfg, knobs)
        runs.append((reused, [t.clone() for t in training_state(sharded)]))
    (reused_first, first), (reused_second, second) = runs
    trained = not all(torch.equal(a, b) for a, b in zip(first, sharded.trained))
    return dict(reused=(reused_first, reused_second), trained=trained,
                equal=len(first) == len(second) and all(torch.equal(a, b) for a, b in zip(first, second)))

"""Gradient accumulation with `no_sync()`: its schedule, its savings, and why it is right.

K micro-batches per optimizer step: the first K−1 run forward and backward inside
`ddp.no_sync()`, so gradients only add up locally; the last one syncs, and DDP all-reduces
each bucket once. Per optimizer step the traffic is the same for every K, so per sample
it falls as 1/K. Three things are measured here on live ranks:

1. the sweep over K (all-reduces, bytes and time per optimizer step and per sample),
2. the gradient the run loop accumulates, against one process on the large batch of
   micro × K × world samples (equal with the loss scaled by 1/K, K× too large without),
3. where `no_sync()` goes: around forward and backward, around backward only, or nowhere.

Why "backward only" fails: `no_sync()` only clears `ddp.require_backward_grad_sync`, and
DDP reads that flag in *forward*: when it is set, `_post_forward` calls
`reducer.prepare_for_backward`, which arms the autograd hooks that all-reduce the buckets.
Once forward ran outside `no_sync()`, the coming backward all-reduces whatever the flag
says by then. Gradients stay right either way (averaging is linear); the traffic is K×.

This module runs the ranks (torch only inside the functions that run on them) and binds the
K slider of `dpviz.lessons.accumulation.widgets` to them; the records and the pure functions of them
(no torch) are `dpviz.lessons.accumulation.records`.
"""
from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from typing import Iterable, Sequence

from dpviz.core.config import NO_SYNC_SCOPES, RunConfig, for_slider, require_int, validate
from dpviz.core.record import RunRecord
from dpviz.engine.ddp_run import run
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.accumulation.records import AccumulationSweep, GradientCheck, accumulation_row

# what `dpviz.<name>` offers from here
FACADE = ("sweep_accumulation", "check_gradients", "compare_scopes", "k_slider", "accumulation_link_slider")

# Small enough that K = 1..8 runs in seconds on a small CPU; a 0.25 MB bucket cap splits the
# 1 MB MLP into several buckets, so "one all-reduce per bucket" is visible.
DEMO_CONFIG = RunConfig(world_size=2, steps=4, layers=4, width=256, batch_per_rank=16,
                        bucket_cap_mb=0.25)
# A slider's first run has a light warm-up in which DDP rebuilds its buckets, later moves start
# with those buckets (dpviz.engine.warm_ranks); then the one steady step the figure draws, no
# more: a shorter wait per move (benchmarks/knob_latency.py).
LIVE_STEPS = 2


def live_config(cfg: RunConfig) -> RunConfig:
    """What a slider's move runs: `LIVE_STEPS` steps, the last one profiled, no parameter
    checks (the schedule draws neither the first step nor a check: `config.for_slider`, as
    03's cap slider)."""
    return for_slider(cfg.replace(steps=min(cfg.steps, LIVE_STEPS)))


# --- live runs ----------------------------------------------------------------------------

def sweep_accumulation(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                       ks: Iterable[int] = range(1, 9), repeats: int = 1) -> AccumulationSweep:
    """Run `cfg` `repeats` times per K on (warm) ranks, K round-robin (a burst of load lands
    on every K, not one), and reduce each K's runs to a row of medians."""
    from dpviz.engine.workloads import validate_run_config

    cfg = validate_run_config(cfg or DEMO_CONFIG)
    ks = check_accum_values(ks)
    require_int("repeats", repeats, 1)
    runs: dict[int, list[RunRecord]] = {k: [] for k in ks}
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        for _ in range(repeats):
            for k in ks:
                runs[k].append(run(cfg, cluster=ranks, accum_steps=k))
    rows = tuple(accumulation_row(*runs[k]) for k in ks)
    return AccumulationSweep(config=cfg.to_dict(), world_size=cfg.world_size, rows=rows)


def _run_k(cfg: RunConfig, cluster: Cluster, k: int) -> RunRecord:
    return run(cfg, cluster=cluster, accum_steps=k)


def k_slider(cluster: Cluster, cfg: RunConfig | None = None,
             values: Sequence[int] = tuple(range(1, 9)), value: int = 4):
    """Slide K (micro-steps per optimizer step) over `values`; runs on the warm `cluster`.

    The figure is one steady step of every rank: K forward/backward blocks, and the
    all-reduces only in the last one (move `cfg.no_sync` to see the pitfalls instead).
    """
    from dpviz.lessons.accumulation.widgets import k_panel

    cfg = validate(cfg or DEMO_CONFIG)
    return k_panel(partial(_run_k, live_config(cfg), cluster), cfg.world_size, values, value, cluster=cluster)


def _run_k_gbps(cfg: RunConfig, cluster: Cluster, k: int, gbps: float) -> RunRecord:
    return run(cfg.replace(link=cfg.link.with_gbps(gbps)), cluster=cluster, accum_steps=k)


def accumulation_link_slider(cluster: Cluster, cfg: RunConfig, k: int = 4,
                             gbps: Sequence[float] | None = None, value: float | None = None):
    """Slide the emulated link's bandwidth (same latency) at K micro-steps on the warm
    `cluster`, beside 03's: the same widget, drawing one steady step's schedule. Offers
    `gbps`, default the link's own × ¼ … 10 (`dpviz.core.link.slider_gbps`)."""
    from dpviz.core.link import slider_gbps
    from dpviz.lessons.accumulation.widgets import link_bandwidth_panel

    cfg = validate(cfg)
    values, start = slider_gbps(cfg.link, gbps, value)
    return link_bandwidth_panel(partial(_run_k_gbps, live_config(cfg), cluster, k), start, cfg.world_size,
                                values, cluster=cluster)


def compare_scopes(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                   scopes: Iterable[str] = NO_SYNC_SCOPES) -> dict[str, RunRecord]:
    """One live run per no_sync placement (same K, same data): scope → record."""
    from dpviz.engine.workloads import validate_run_config

    cfg = validate_run_config(cfg or DEMO_CONFIG.replace(accum_steps=3))
    if cfg.accum_steps < 2:
        raise ValueError("no_sync only matters with accumulation: use accum_steps >= 2")
    scopes = tuple(scopes)
    for scope in scopes:
        cfg.replace(no_sync=scope)          # an unknown scope fails here with config's message
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        return {scope: run(cfg, cluster=ranks, no_sync=scope) for scope in scopes}


def check_gradients(cfg: RunConfig | None = None, *, cluster: Cluster | None = None) -> GradientCheck:
    """Accumulate one step on live ranks (the run loop's own code) and compare the gradient
    with one process on the large batch of micro × K × world samples."""
    from dpviz.engine.workloads import import_path, validate_run_config

    cfg = validate_run_config(cfg or DEMO_CONFIG.replace(accum_steps=3))   # a user's model too
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        results = ranks.run_task(accumulated_gradient, cfg, import_path(), timeout_s=cfg.timeout_s)
    return GradientCheck(accum_steps=cfg.accum_steps, scale_loss=cfg.scale_loss,
                         no_sync=cfg.no_sync, **results[0])


def check_accum_values(ks: Iterable[int]) -> list[int]:
    """The K values as a list, or a ValueError before any rank starts."""
    ks = list(ks)
    if not ks:
        raise ValueError("give at least one K (micro-steps per optimizer step), e.g. 1,2,4,8")
    for k in ks:
        validate(RunConfig(accum_steps=k))  # same bounds and message as the run itself
    return ks


# --- rank side ----------------------------------------------------------------------------

class KeepGradient:
    """Stands in for the optimizer in the run loop's train step: `step()` keeps a flat copy
    of the accumulated gradient instead of applying it, so the check runs the exact code
    `dpviz run` runs."""

    def __init__(self, model):
        self.model = model
        self.flat = None

    def step(self) -> None:
        import torch

        self.flat = torch.cat([p.grad.reshape(-1) for p in self.model.parameters()]).clone()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=set_to_none)


def large_batch_gradient(cfg: RunConfig):
    """One process, one forward and backward on all micro × K × world samples of step 0.

    The mean loss over the concatenated batch is (1/K) Σ_k mean loss of micro-batch k:
    this is what accumulation with the loss scaled by 1/K must reproduce. A BatchNorm
    model normalises each rank's micro-batch by its own statistics under DDP, so its
    reference runs every (micro-step, rank) slice separately and averages their losses.
    """
    import torch

    from dpviz.engine.workloads import build_workload, compute_loss, has_batchnorm

    workload = build_workload(cfg)
    model, n = workload.model, cfg.world_size * cfg.batch_per_rank
    parts = [workload.batch(0, micro, n) for micro in range(cfg.accum_steps)]
    if has_batchnorm(model):
        slices = [(x[i:i + cfg.batch_per_rank], y[i:i + cfg.batch_per_rank])
                  for x, y in parts for i in range(0, n, cfg.batch_per_rank)]
        for x, y in slices:
            (compute_loss(workload, model(x), y) / len(slices)).backward()
    else:
        x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        compute_loss(workload, model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def accumulated_gradient(ctx: RankContext, cfg: RunConfig, search_path: list[str] = ()) -> dict:
    """Rank task: step 0 of the run loop with K micro-steps; gradient and hook counts
    (`search_path`: the caller's module path, where a user's model imports from)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpviz.engine.ddp_run import record_buckets, train_step
    from dpviz.engine.workloads import build_workload, use_import_path

    use_import_path(list(search_path))
    device = torch.device(ctx.device)
    workload = build_workload(cfg)
    model = workload.model.to(device)
    ddp = DDP(model, bucket_cap_mb=cfg.bucket_cap_mb,
              device_ids=[device.index] if device.type == "cuda" else None)
    log = record_buckets(ddp, model, ctx.world_size)  # counts buckets per micro-step
    keep = KeepGradient(model)
    train_step(ctx, cfg, ddp, keep, log, 0, lambda name: nullcontext(), workload)

    everyone = [torch.empty_like(keep.flat) for _ in range(ctx.world_size)]
    dist.all_gather(everyone, keep.flat)
    mine = keep.flat.cpu()
    out = dict(all_reduces_per_micro=tuple(sum(b["micro_step"] == m for b in log.seen)
                                           for m in range(cfg.accum_steps)),
               max_diff_across_ranks=max(float((e.cpu() - mine).abs().max()) for e in everyone))
    if ctx.rank == 0:
        reference = large_batch_gradient(cfg)
        out.update(max_diff_vs_large_batch=float((mine - reference).abs().max()),
                   reference_max_abs=float(reference.abs().max()),
                   norm_ratio=float(mine.norm() / reference.norm()))
    return out

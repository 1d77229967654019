"""What ranks average, and when: the worked example, uneven shards, parameter vs gradient averaging.

Four live experiments on the same idea — data parallel training is one optimizer seeing the
*global* gradient, and averaging is how ranks agree on it:

1. `worked_example`: f(x) = w·x, squared loss, 2 ranks, w = 1, lr = 0.1 (seed 002 §4.3),
   computed with autograd and `all_reduce` on real ranks, next to the numbers the seed prints.
2. `uneven_shards`: with shards of M_n samples the global gradient is Σ (M_n/M)·g_n; a plain
   mean of the g_n (what DDP computes) is wrong unless each rank scales its loss by N·M_n/M.
3. `compare_averaging`: per-step gradient averaging (DDP) against local SGD that averages the
   parameters every H steps: replica drift between syncs and the loss of the averaged model.
4. `compare_hooks`: a hand-written post-accumulate-grad hook that averages the gradients, and
   picotron issue #39's, which averages the weights: ranks agree after every backward, yet the
   gradients stay local and training leaves large-batch SGD.

Rank-side functions (`*_rank`) run via `Cluster.run_task` and return plain data; the parent
functions assemble the frozen records of `averaging/records.py`, which render without torch.
Why over 300 lines: four experiments on one idea, each rank function beside the verb that runs
it; their records and analysis already live apart.
"""
from __future__ import annotations

from functools import partial
from typing import Sequence

from dpviz.core.config import RunConfig, require_int, validate_mlp_only
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.averaging.records import (
    AGGREGATIONS, AveragingComparison, AveragingRun, HOOK_MODES, HookComparison, HookRun, PERIODS,
    UnevenShards, WORKED_LR, WORKED_W0, WORKED_X, WORKED_Y, WorkedExample, WorkedStep,
)


def _tupled(fields: dict) -> dict:
    """A rank's plain lists → tuples, as the frozen records hold them."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}


# what `dpviz.<name>` offers from here
FACADE = ("worked_example", "uneven_shards", "compare_averaging", "compare_hooks", "period_slider")

# --- 1. the worked example (seed 002 §4.3) -----------------------------------------------------

def worked_example_rank(ctx: RankContext, xs, ys, w0: float, lr: float, steps: int,
                        reduction: str) -> list[dict]:
    """Each rank: its contiguous shard, autograd for d loss/dw, all_reduce, SGD update."""
    import torch
    import torch.distributed as dist

    per_rank = len(xs) // ctx.world_size
    lo = ctx.rank * per_rank
    x = torch.tensor(xs[lo:lo + per_rank], dtype=torch.float64)
    y = torch.tensor(ys[lo:lo + per_rank], dtype=torch.float64)
    w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    out = []
    for step in range(steps):
        squared = (w * x - y) ** 2
        loss = squared.sum() if reduction == "sum" else squared.mean()
        (grad,) = torch.autograd.grad(loss, w)
        mine = torch.stack([loss.detach(), grad])               # (2,): this rank's loss, grad
        everyone = [torch.empty_like(mine) for _ in range(ctx.world_size)]
        dist.all_gather(everyone, mine)                          # only to show them side by side
        averaged = grad.clone()
        dist.all_reduce(averaged)                                # the data-parallel step
        averaged /= ctx.world_size
        w_before = float(w.detach())
        with torch.no_grad():
            w -= lr * averaged
        out.append(dict(step=step, w=w_before, losses=[float(e[0]) for e in everyone],
                        grads=[float(e[1]) for e in everyone], averaged_grad=float(averaged),
                        w_after=float(w.detach())))
    return out


def worked_example(*, cluster: Cluster | None = None, world_size: int = 2, steps: int = 4,
                   reduction: str = "sum") -> WorkedExample:
    """The seed's example on the warm `cluster` or `world_size` fresh ranks (1, 2 or 4)."""
    n = cluster.world_size if cluster is not None else world_size
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
    if len(WORKED_X) % n:
        raise ValueError(f"the worked example has {len(WORKED_X)} samples: use 1, 2 or 4 ranks, not {n}")
    with using_cluster(cluster, n) as ranks:
        per_rank = ranks.run_task(worked_example_rank, WORKED_X, WORKED_Y, WORKED_W0, WORKED_LR,
                                  steps, reduction)
    worst = max(abs(a["w_after"] - b["w_after"]) for r in per_rank[1:]
                for a, b in zip(per_rank[0], r)) if len(per_rank) > 1 else 0.0
    steps = tuple(WorkedStep(**_tupled(s)) for s in per_rank[0])
    return WorkedExample(reduction, WORKED_X, WORKED_Y, WORKED_LR, steps, worst)


# --- 2. uneven shards ----------------------------------------------------------------------------

def uneven_shards_rank(ctx: RankContext, cfg: RunConfig, sizes) -> dict:
    """Local mean-loss gradient on this rank's shard, aggregated four ways; rank 0 compares."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpviz.core.rounding import mlp_sums, sum_order_bound
    from dpviz.engine.workloads import build_mlp, global_batch, loss_fn

    total = sum(sizes)
    x, y = global_batch(cfg.replace(world_size=1, batch_per_rank=total), 0, 0)   # (M, width)
    lo = sum(sizes[:ctx.rank])
    xs, ys = x[lo:lo + sizes[ctx.rank]], y[lo:lo + sizes[ctx.rank]]

    def flat_grad(model, scale: float = 1.0) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        (loss_fn(model(xs), ys) * scale).backward()
        return torch.cat([p.grad.reshape(-1) for p in model.parameters()])

    model = build_mlp(cfg)                                  # same seed: same weights on every rank
    local = flat_grad(model)
    weighted = local * (sizes[ctx.rank] / total)
    dist.all_reduce(weighted)
    plain = local.clone()
    dist.all_reduce(plain)
    plain /= ctx.world_size
    ddp = DDP(build_mlp(cfg))                               # DDP always divides by world size
    ddp_plain = flat_grad(ddp)
    ddp_scaled = flat_grad(ddp, ctx.world_size * sizes[ctx.rank] / total)
    result = dict(local_norm=float(local.norm()))
    if ctx.rank == 0:
        reference = build_mlp(cfg)
        reference.zero_grad(set_to_none=True)
        loss_fn(reference(x), y).backward()
        full = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
        result["full_norm"] = float(full.norm())
        # every sum of the MLP over all M samples, re-ordered by sharding (dpviz.core.rounding)
        result["bound"] = sum_order_bound(mlp_sums(cfg, batch=total), float(full.abs().max()))
        result["errors"], result["relative"] = {}, {}
        for name, agg in zip(AGGREGATIONS, (weighted, plain, ddp_plain, ddp_scaled)):
            result["errors"][name] = float((agg - full).abs().max())
            result["relative"][name] = float((agg - full).norm() / full.norm())
    return result


def uneven_shards(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                  sizes=(24, 8)) -> UnevenShards:
    """Run the comparison on live ranks; `sizes` gives M_n, one per rank (of the warm
    `cluster`, or as many fresh ranks as sizes)."""
    cfg = validate_mlp_only(cfg or RunConfig(layers=2, width=32), "uneven_shards")
    sizes = tuple(int(s) for s in sizes)
    n = cluster.world_size if cluster is not None else len(sizes)
    if len(sizes) != n or min(sizes) < 1:
        raise ValueError(f"give one shard size >= 1 per rank ({n} ranks), got {list(sizes)}")
    with using_cluster(cluster, n, cfg.backend, cfg.timeout_s) as ranks:
        results = ranks.run_task(uneven_shards_rank, cfg, sizes)
    head = results[0]
    return UnevenShards(sizes=sizes, full_grad_norm=head["full_norm"],
                        local_grad_norms=tuple(r["local_norm"] for r in results),
                        errors=head["errors"], relative_errors=head["relative"],
                        rounding_bound=head["bound"])


# --- 3. parameter averaging (local SGD) vs gradient averaging --------------------------------------

# Steps' parameters a rank holds before gathering them (floats): the measurement's memory bound.
GATHER_FLOATS = 1 << 22


def _measured(everyone, world_size: int):
    """Measurement only, from every rank's [θ_r, loss_r] of one step: (RMS over ranks of
    ‖θ_r − θ̄‖, θ̄ = mean over ranks, mean loss over ranks). Sums over ranks run in rank order,
    so with 2 ranks every number is bit for bit what all-reduces give (a + b either way)."""
    import torch

    ranks = torch.stack(everyone)
    mean = ranks[:, :-1].sum(0) / world_size
    sq = torch.stack([((theta[:-1] - mean) ** 2).sum() for theta in everyone]).sum()
    return float(torch.sqrt(sq / world_size)), mean, float(ranks[:, -1].sum()) / world_size


def _gathered(rows: list, world_size: int) -> list[list]:
    """Per step, every rank's row ([θ_r, loss_r]), in one all_gather of this rank's rows."""
    import torch
    import torch.distributed as dist

    mine = torch.stack(rows)
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine)
    return [[theirs[i] for theirs in everyone] for i in range(len(rows))]


def averaging_rank(ctx: RankContext, cfg: RunConfig, mode: str, period: int, steps: int) -> dict:
    """Train `steps` SGD steps on this rank's batches with gradient or parameter averaging.

    The measurement (drift, the averaged model's held-out loss, the mean training loss) needs
    every rank's parameters of every step: they are gathered GATHER_FLOATS at a time (one
    all_gather per run at the slider's size) and measured afterwards, instead of three
    all-reduces per step that held both ranks in lockstep (most of an H-slider move's rank
    time). Training is untouched: only the algorithm's own averages communicate during it."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    from dpviz.engine.workloads import build_mlp, global_batch, loss_fn, rank_batch

    model = build_mlp(cfg)
    net = DDP(model) if mode == "gradient" else model        # DDP: gradients averaged in backward
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    x_eval, y_eval = global_batch(cfg, 1_000_000, 0)         # held out: a step never trained on
    probe = build_mlp(cfg)                                   # holds θ̄ for the evaluation
    drift, eval_loss, train_loss, averages, rows = [], [], [], 0, []
    per_gather = max(1, GATHER_FLOATS // sum(p.numel() + 1 for p in model.parameters()))

    def measure() -> None:
        for everyone in _gathered(rows, ctx.world_size):
            d, mean, mean_loss = _measured(everyone, ctx.world_size)
            vector_to_parameters(mean, probe.parameters())
            with torch.no_grad():
                eval_loss.append(float(loss_fn(probe(x_eval), y_eval)))
            drift.append(d)
            train_loss.append(mean_loss)
        rows.clear()

    for step in range(steps):
        x, y = rank_batch(cfg, None, step, 0, ctx.rank)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if mode == "gradient":
            averages += 1
        params = parameters_to_vector(model.parameters()).detach()
        rows.append(torch.cat([params, loss.detach().reshape(1)]))
        if mode == "parameter" and (step + 1) % period == 0:
            synced = params.clone()
            dist.all_reduce(synced)                          # the algorithm's own average
            vector_to_parameters(synced / ctx.world_size, model.parameters())
            averages += 1
        if len(rows) == per_gather:   # the same steps on every rank (same model size)
            measure()
    if rows:
        measure()
    return dict(drift=drift, eval_loss=eval_loss, train_loss=train_loss, averages=averages,
                bytes_per_average=int(params.numel() * params.element_size()))


def compare_averaging(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                      periods=(4, 16), steps: int = 48,
                      gradient: AveragingComparison | None = None) -> AveragingComparison:
    """Gradient averaging every step vs parameter averaging every H in `periods`, same data.

    `gradient`: an earlier comparison with the same config and steps whose gradient-averaging
    run is reused (it does not depend on H), so a slider over H re-runs only the H side.
    """
    cfg = validate_mlp_only(cfg or RunConfig(layers=2, width=64, batch_per_rank=16, lr=0.2),
                            "compare_averaging")
    cfg = cfg.replace(world_size=cluster.world_size if cluster is not None else cfg.world_size)
    if any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in periods):
        raise ValueError(f"periods are steps between parameter averages, whole numbers >= 1: {periods}")
    require_int("steps", steps, 1)
    if gradient is not None and (gradient.config != cfg.to_dict()
                                 or len(gradient.runs[0].drift) != steps):
        raise ValueError("the earlier comparison ran another config or step count: run both afresh")
    runs = [gradient.runs[0]] if gradient is not None else []
    todo = [("parameter", h) for h in periods]
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        for mode, period in todo if gradient is not None else [("gradient", 1)] + todo:
            res = ranks.run_task(averaging_rank, cfg, mode, period, steps)[0]
            runs.append(AveragingRun(mode=mode, period=period, **_tupled(res)))
    return AveragingComparison(config=cfg.to_dict(), runs=tuple(runs))


def _run_period(cluster: Cluster, steps: int, first: list, period: int) -> AveragingComparison:
    """Both schemes on the first call; afterwards only parameter averaging with this H."""
    comparison = compare_averaging(cluster=cluster, periods=(period,), steps=steps,
                                   gradient=first[0] if first else None)
    if not first:
        first.append(comparison)
    return comparison


def period_slider(cluster: Cluster, periods: Sequence[int] = PERIODS, value: int = 8,
                  steps: int = 32):
    """Slider over H re-running parameter averaging live on the warm `cluster`, beside the
    gradient-averaging run made when the slider was built."""
    from dpviz.lessons.averaging.widgets import period_panel

    return period_panel(partial(_run_period, cluster, steps, []), periods, value, cluster=cluster)


# --- 4. a gradient hook that averages the weights (picotron #39) --------------------------------

def _average_hook(mode: str, world_size: int):
    """The hook `register_post_accumulate_grad_hook` calls with the *parameter*.

    "gradient" all-reduces `param.grad`, as intended. "weight" is picotron's hook (issue #39):
    its argument is named `grad` but is the parameter, so it all-reduces and divides the
    weights in place and leaves the gradient local.
    """
    import torch.distributed as dist

    def average(param) -> None:
        target = param.grad if mode == "gradient" else param      # the bug: `param` is not a grad
        dist.all_reduce(target)
        target /= world_size

    return average


def hook_rank(ctx: RankContext, cfg: RunConfig, mode: str) -> dict:
    """Train with the hand-written hook; after backward and after the step, compare ranks."""
    import torch
    from torch.nn.utils import parameters_to_vector

    from dpviz.lessons.lifecycle.live import max_diff_vs_rank0
    from dpviz.engine.workloads import build_mlp, loss_fn, rank_batch, single_process_params

    model = build_mlp(cfg)
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(_average_hook(mode, ctx.world_size))
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    reference = single_process_params(cfg)
    out = dict(params_after_backward=[], params_after_step=[], grads_after_backward=[],
               vs_large_batch=[])
    for step in range(cfg.steps):
        x, y = rank_batch(cfg, None, step, 0, ctx.rank)
        loss_fn(model(x), y).backward()
        flat = parameters_to_vector(model.parameters()).detach()
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        out["params_after_backward"].append(max_diff_vs_rank0(flat))
        out["grads_after_backward"].append(max_diff_vs_rank0(grads))
        opt.step()
        opt.zero_grad(set_to_none=True)
        flat = parameters_to_vector(model.parameters()).detach()
        out["params_after_step"].append(max_diff_vs_rank0(flat))
        out["vs_large_batch"].append(float((flat - reference[step]).abs().max()))
    return out


def compare_hooks(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                  steps: int = 6) -> HookComparison:
    """The right hook (average gradients) and picotron #39's (average weights), same data."""
    cfg = validate_mlp_only(cfg or RunConfig(layers=2, width=32, batch_per_rank=8, lr=0.1),
                            "compare_hooks")
    if steps < 2:
        raise ValueError(f"need steps >= 2 (the weight hook first changes weights in step 1), got {steps}")
    cfg = cfg.replace(world_size=cluster.world_size if cluster is not None else cfg.world_size,
                      steps=steps)
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        results = [ranks.run_task(hook_rank, cfg, mode)[0] for mode in HOOK_MODES]
    runs = [HookRun(mode=mode, **_tupled(res)) for mode, res in zip(HOOK_MODES, results)]
    return HookComparison(config=cfg.to_dict(), runs=tuple(runs))

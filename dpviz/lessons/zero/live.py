"""ZeRO / FSDP: the memory model of the ZeRO paper, and a real sharded run beside it.

Model (Rajbhandari et al., 2019, mixed-precision Adam): a replica of a Ψ-parameter model
holds 2Ψ bytes of fp16 parameters, 2Ψ of fp16 gradients and KΨ of optimizer state
(K = 12: fp32 master weights, first and second moments, 4 bytes each). ZeRO stage 1 shards
the optimizer state over N data-parallel ranks, stage 2 also the gradients, stage 3 also
the parameters — each sharded part is divided by N.

Reality (live CPU gloo ranks, fp32 Adam, so 4Ψ + 4Ψ + 8Ψ): stage 0 is DDP + Adam, stage 1
is DDP + `ZeroRedundancyOptimizer` (each rank steps its slice of the parameters, then
broadcasts it), stage 3 is FSDP2 `fully_shard` (all-gather parameters before each layer's
forward and backward, reduce-scatter its gradients). Bytes are read from the live tensors
after a real step; the collectives are counted from each rank's profiler trace.
Stage 2 has no separate live run. The paper's stage 2 (DeepSpeed's) keeps the parameters
replicated at all times. PyTorch's nearest configuration, FSDP with
`reshard_after_forward=False` (FSDP1: `ShardingStrategy.SHARD_GRAD_OP`), keeps the gathered
parameters from forward through backward — the paper's stage-2 bytes during the step — but
reshards them after backward, so between steps it holds stage 3's bytes.

This module runs the live ranks; the model, the records and the trace reading (no torch)
are `dpviz.lessons.zero.records`.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

from dpviz.analysis.scan import STEP_PREFIX, read_trace
from dpviz.core.config import RunConfig, validate, validate_world_size
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.zero.records import (
    ADAM_LR, STRATEGIES, ShardedRank, ZeroSweep, count_collectives,
)

FACADE = ("run_sharded",)  # what `dpviz.<name>` offers from here


def _group(ctx: RankContext, n: int):
    """The first `n` ranks as a process group (every rank must call this, member or not)."""
    import torch.distributed as dist

    return dist.group.WORLD if n == ctx.world_size else dist.new_group(ranks=list(range(n)))


def _wrap(model, strategy: str, group):
    """(module to call, optimizer) for one strategy over `group`; the optimizer is Adam."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    if strategy == "ddp":
        ddp = DDP(model, process_group=group)
        return ddp, torch.optim.Adam(ddp.parameters(), lr=ADAM_LR)
    if strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        ddp = DDP(model, process_group=group)
        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam,
                                            process_group=group, lr=ADAM_LR)
    if strategy == "fsdp":
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard

        mesh = DeviceMesh.from_group(group, "cpu")  # FSDP2 needs a mesh, on CPU too
        for unit in fsdp_units(model):      # gathered just in time, one unit after the other
            fully_shard(unit, mesh=mesh)
        fully_shard(model, mesh=mesh)       # the root: whatever no unit holds (embeddings, head)
        return model, torch.optim.Adam(model.parameters(), lr=ADAM_LR)
    raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")


def fsdp_units(model) -> list:
    """The modules FSDP2 shards one by one: each transformer or conv block (`model.blocks`,
    an nn.ModuleList), else each Linear (the MLP: a unit per Linear, as before workloads).
    The root unit takes the rest (embeddings, head)."""
    import torch

    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, torch.nn.ModuleList):
        return list(blocks)
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def single_process_adam(cfg: RunConfig) -> tuple["torch.Tensor", list]:
    """One process, Adam, the concatenated global batches: what every strategy must equal.
    Returns the final flat parameters and the flat gradient of every step."""
    import torch

    from dpviz.engine.workloads import build_workload, compute_loss, flat_params, has_batchnorm

    workload = build_workload(cfg)
    model = workload.model
    opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR)
    grads = []
    for step in range(cfg.steps):
        x, y = workload.batch(step, 0, cfg.world_size * cfg.batch_per_rank)   # the global batch
        # BatchNorm normalises each rank's slice by its own statistics: so does the reference
        n = cfg.world_size if has_batchnorm(model) else 1
        for xs, ys in zip(x.split(len(x) // n), y.split(len(y) // n)):
            (compute_loss(workload, model(xs), ys) / n).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        opt.step()
        opt.zero_grad(set_to_none=True)
    return flat_params(model), grads


@functools.lru_cache(maxsize=4)
def _reference(cfg: RunConfig) -> tuple:
    """One-process Adam's final parameters and their per-parameter rounding bounds. Cached:
    a warm rank 0 checks every strategy at one world size against the same reference."""
    from dpviz.engine.workloads import addition_chain, build_workload

    single, grads = single_process_adam(cfg)
    chain = addition_chain(cfg, build_workload(cfg))
    return single, adam_entry_bounds(grads, ADAM_LR, chain, float(single.abs().max()))


def compare_with_single_process(cfg: RunConfig, params) -> tuple[float, float]:
    """(max |θ − one-process Adam|, max of |Δθ| ÷ its per-parameter rounding bound)."""
    single, bounds = _reference(cfg)
    diff = (params - single).abs()
    return float(diff.max()), float((diff / bounds).max())


def shard_rank(ctx: RankContext, cfg: RunConfig, strategy: str, paths: list[str] = ()) -> dict | None:
    """Train `cfg.steps` Adam steps under one strategy on the first `cfg.world_size` ranks;
    bytes held and collectives traced. Ranks outside that group return None.

    One warm cluster serves every world size up to its own: no cold start per size. The
    collectives of the last step are kept apart: with `cfg.steps >= 3` it is a steady DDP step
    (step 0 uses one bucket, and step 1's forward broadcasts the rebuilt bucket order once).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from dpviz.lessons.memory.live import optimizer_state_bytes, tensor_bytes
    from dpviz.engine.workloads import (
        build_workload, compute_loss, describe_workload, rank_batch, use_import_path,
    )

    use_import_path(list(paths))     # the caller's import path: a user's model imports here too
    if cfg.world_size > ctx.world_size:
        raise ValueError(f"world size {cfg.world_size} needs a cluster of at least that many ranks")
    group = _group(ctx, cfg.world_size)
    if ctx.rank >= cfg.world_size:
        return None
    workload = build_workload(cfg)
    model = workload.model
    n_params = sum(p.numel() for p in model.parameters())
    info = describe_workload(model, workload.name) if ctx.rank == 0 else None
    module, opt = _wrap(model, strategy, group)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for step in range(cfg.steps):
            with record_function(f"{STEP_PREFIX}{step}"):
                x, y = rank_batch(cfg, workload, step, 0, ctx.rank)
                compute_loss(workload, module(x), y).backward()
                grad_bytes = sum(tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)
                opt.step()
                opt.zero_grad(set_to_none=True)
    path = Path(ctx.workdir) / f"zero-{strategy}-rank{ctx.rank}.json"
    prof.export_chrome_trace(str(path))
    trace = read_trace(path)
    path.unlink()
    per_step = count_collectives(trace, ctx.rank, cfg.steps)
    gloo, gloo_bytes, c10d = per_step[-1]
    by_step = [counts for counts, _, _ in per_step]
    state = optimizer_state_bytes(opt)
    # the check runs after profiling: FSDP's full_tensor() is itself an all-gather
    full = torch.cat([(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().reshape(-1)
                      for p in model.parameters()])
    diff, ratio = compare_with_single_process(cfg, full) if ctx.rank == 0 else (None, None)
    return dict(strategy=strategy, stage=STRATEGIES[strategy], world_size=cfg.world_size,
                rank=ctx.rank, n_params=n_params,
                param_bytes=sum(tensor_bytes(p) for p in model.parameters()),
                grad_bytes=grad_bytes,
                optimizer_bytes=state.get("exp_avg", 0) + state.get("exp_avg_sq", 0),
                step_bytes=state.get("step", 0), collectives=gloo, collective_bytes=gloo_bytes,
                launches=c10d, collectives_by_step=by_step,
                max_diff_vs_single_process=diff, diff_over_rounding_bound=ratio, workload=info)


def run_sharded(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                world_sizes: tuple[int, ...] = (1, 2, 4),
                strategies: tuple[str, ...] = tuple(STRATEGIES)) -> ZeroSweep:
    """Every strategy at every world size on live gloo ranks.

    One warm cluster (given, or started) of at least the largest size; smaller world sizes
    run on its first ranks.
    """
    cfg = validate(cfg or RunConfig(steps=3))
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {', '.join(STRATEGIES)}")
    if cfg.backend != "gloo":
        raise ValueError("the sharded demo runs on CPU gloo ranks: use backend='gloo'")
    if not world_sizes:
        raise ValueError("give at least one world size, e.g. world_sizes=(1, 2, 4)")
    for n in world_sizes:
        validate_world_size(n, "gloo")
    from dpviz.engine.workloads import import_path, validate_model_spec

    validate_model_spec(cfg.model, seed=cfg.seed)   # a user's model fails here, before any rank
    rows = []
    if cluster is not None and (cluster.backend != "gloo" or cluster.world_size < max(world_sizes)):
        raise ValueError(f"the sharded demo needs at least {max(world_sizes)} gloo ranks; this cluster "
                         f"has {cluster.world_size} {cluster.backend} ranks")
    with using_cluster(cluster, max(world_sizes), "gloo", cfg.timeout_s) as ranks:
        for n in world_sizes:
            for strategy in strategies:
                rows += ranks.run_task(shard_rank, cfg.replace(world_size=n), strategy,
                                       import_path(), timeout_s=cfg.timeout_s)
    rows = [r for r in rows if r is not None]
    info = next(r.pop("workload") for r in rows if r["rank"] == 0)
    for r in rows:
        r.pop("workload", None)
    return ZeroSweep(config=cfg.to_dict(), workload=info,
                     ranks=tuple(ShardedRank(**{**r, "collectives_by_step": tuple(r["collectives_by_step"])})
                                 for r in rows))


def adam_entry_bounds(grads: Sequence, lr: float, terms: int, param_max: float):
    """Per-entry rounding bound on |θ_a − θ_b| after len(grads) Adam steps (a tensor).

    Adam divides each gradient entry by its own running RMS: its update is lr·m̂/(√v̂ + ε_adam),
    about ±lr whatever the gradient's size. An entry whose gradient is within rounding of zero
    (|g| ≲ δ, the re-ordering bound) can therefore take an lr-sized step in either direction:
    up to 2·lr per step apart, however small the rounding. An entry with |g| ≫ δ changes its
    update by the relative change of its gradient, ≤ 2·lr·δ/|g| per step. So the bound is
    lr-sized only where the gradient was near zero at some step, and tight everywhere else.
    Added per step: the update's own rounding, with the gradient's re-ordering already counted
    above — one ulp of |θ| for θ − update, and ≤ 8 roundings of m, v, the corrections, the
    square root and the division on an update of relative size ≤ 32 (as in
    `memory.adam_formula_bounds`): ε·(|θ| + 8·32·lr). (Scaling the ulp by the chain length,
    as an SGD step's gradient error must be, would let a GPT's N(0, 1) embeddings hide an
    lr-sized error: a rank's shard alone would pass.) `grads` are one run's flat gradients
    per step (the reference's), δ = `sum_order_bound(terms, max |g|)`.
    """
    import torch

    from dpviz.core.rounding import EPS32, sum_order_bound

    g = torch.stack([x.abs() for x in grads])
    delta = sum_order_bound(terms, float(g.max()))
    floor = g.min(0).values                      # each entry's smallest |g| over the steps
    per_step = lr * torch.clamp(2 * delta / floor, max=2.0)   # |g| = 0 → 2·lr (inf clamped)
    return len(grads) * (per_step + EPS32 * (param_max + 8 * 32 * lr))

"""The DDP lifecycle on live ranks: who a rank is, what data it draws, how replicas start equal,
what happens to buffers, and why one rank saves.

1. `rank_identities`: rank, world size, and the local rank / local world size a rank derives
   from the hosts of its peers (torchrun hands the same numbers in LOCAL_RANK/LOCAL_WORLD_SIZE).
2. `sampler_shards`: the indices `DistributedSampler` gives each rank, per epoch.
3. `ddp_lifecycle`: ranks build *different* models (the small `bn_net`, or a workload's model
   with seed + rank), DDP's constructor broadcasts rank 0's parameters and buffers; training
   on rank-shifted data shows what `forward_sync_buffers` (re-broadcast rank 0's buffers before
   every forward; torch < 2.13 called it `broadcast_buffers`) does to BatchNorm running
   statistics — or records that the model has no buffers; rank 0 saves, all ranks load.

Rank-side functions (`*_rank`) run via `Cluster.run_task` and return plain data; the parent
functions assemble the records of `lifecycle_records.py`, which render without torch.
"""
from __future__ import annotations

from dpviz.core.config import RunConfig, validate
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.lifecycle.records import (
    BN_NET, Lifecycle, RankIdentity, SamplerShards, torchrun_layout,
)

FACADE = ("rank_identities", "sampler_shards", "ddp_lifecycle")  # what `dpviz.<name>` offers from here

# --- 1. rank, local rank, world size ---------------------------------------------------------


def identity_rank(ctx: RankContext) -> dict:
    """Ask the process group who we are; derive the local numbers from everyone's host name."""
    import os
    import socket

    import torch.distributed as dist

    host = socket.gethostname()
    hosts: list[str] = [""] * dist.get_world_size()
    dist.all_gather_object(hosts, host)
    rank = dist.get_rank()
    same_host = [r for r, h in enumerate(hosts) if h == host]
    return dict(rank=rank, world_size=dist.get_world_size(), local_rank=same_host.index(rank),
                local_world_size=len(same_host), host=host, pid=os.getpid())


def rank_identities(*, cluster: Cluster | None = None, world_size: int = 2) -> list[RankIdentity]:
    """Who each rank is, asked on the warm `cluster` or on `world_size` fresh ranks."""
    with using_cluster(cluster, world_size) as ranks:
        return [RankIdentity(**r) for r in ranks.run_task(identity_rank)]


def shards_by_rank_argument(nnodes: int, nproc_per_node: int, dataset_size: int,
                            argument: str = "rank") -> tuple[tuple[int, ...], ...]:
    """The indices each process of a torchrun job draws in one epoch (no shuffle), when it
    builds its `DistributedSampler` with its global `rank` (right) or its `local_rank`.

    Seed 003 passes `rank=local_rank` (to `init_process_group` and the sampler): right on one
    node, where the two coincide; on several, the processes with the same local rank draw the
    same shard, and the shards of the higher ranks are never drawn.
    """
    from torch.utils.data import DistributedSampler

    if argument not in ("rank", "local_rank"):
        raise ValueError(f"argument must be 'rank' or 'local_rank', got {argument!r}")
    return tuple(tuple(DistributedSampler(range(dataset_size), num_replicas=i.world_size,
                                          rank=getattr(i, argument), shuffle=False))
                 for i in torchrun_layout(nnodes, nproc_per_node))


# --- 2. DistributedSampler ---------------------------------------------------------------------


def sampler_rank(ctx: RankContext, dataset_size: int, epochs: int, shuffle: bool, drop_last: bool,
                 set_epoch: bool, seed: int) -> list[list[int]]:
    """This rank's indices per epoch, from torch's own DistributedSampler."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(range(dataset_size), shuffle=shuffle, drop_last=drop_last,
                                 seed=seed)  # rank and world size come from the process group
    out = []
    for epoch in range(epochs):
        if set_epoch:
            sampler.set_epoch(epoch)  # reseeds the shuffle: same permutation on every rank
        out.append(list(sampler))
    return out


def sampler_shards(*, cluster: Cluster | None = None, world_size: int = 2, dataset_size: int = 10,
                   epochs: int = 2, shuffle: bool = True, drop_last: bool = False,
                   set_epoch: bool = True, seed: int = 0) -> SamplerShards:
    """The indices DistributedSampler hands each rank (the warm `cluster`'s, or `world_size`
    fresh ones), per epoch."""
    n = cluster.world_size if cluster is not None else world_size
    if dataset_size < n:
        raise ValueError(f"a dataset of {dataset_size} samples cannot feed {n} "
                         "ranks: use at least one sample per rank")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    with using_cluster(cluster, n) as ranks:
        per_rank = ranks.run_task(sampler_rank, dataset_size, epochs, shuffle, drop_last, set_epoch, seed)
    shards = tuple(tuple(tuple(per_rank[r][e]) for r in range(n)) for e in range(epochs))
    return SamplerShards(dataset_size=dataset_size, world_size=n, shuffle=shuffle,
                         drop_last=drop_last, set_epoch=set_epoch, shards=shards)


# --- 3. construction broadcast, buffers, save on rank 0 -----------------------------------------


def bn_net(width: int, seed: int):
    """BatchNorm first, so its running mean tracks the raw input mean (a buffer, not a param)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.BatchNorm1d(width), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 1))


def max_diff_vs_rank0(flat) -> float:
    """max over ranks of max |flat_r − flat_0| (collective: every rank must call it)."""
    import torch.distributed as dist

    ref = flat.clone()
    dist.broadcast(ref, 0)
    diff = (flat - ref).abs().max()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    return float(diff)


def _flat(tensors):
    """One float vector of `tensors` (empty for none: a model without buffers)."""
    import torch

    parts = [t.detach().reshape(-1).float() for t in tensors]
    return torch.cat(parts) if parts else torch.zeros(0)


def _buffer_diff(model) -> float | None:
    """max |buffer_r − buffer_0| over ranks, None for a model without buffers (collective)."""
    buffers = _flat(model.buffers())
    return max_diff_vs_rank0(buffers) if buffers.numel() else None


def _first_batchnorm(model):
    from dpviz.engine.torch_gate import batch_norm_classes

    return next((m for m in model.modules() if isinstance(m, batch_norm_classes())), None)


def _rank_model(cfg, width: int, seed: int, shift: float, rank: int):
    """This rank's model, built with its own seed, and its data: `batch(step)` → (inputs,
    targets), the inputs shifted by rank · `shift` when they are floats (token ids are not).
    No `cfg`: `bn_net` on Gaussian rows, loss = mean squared output."""
    import torch

    if cfg is None:
        model = bn_net(width, seed + rank)
        gen = torch.Generator().manual_seed(seed * 1009 + rank)
        batch = lambda step: (torch.randn(16, width, generator=gen) + shift * rank, None)
        return model, batch, lambda out, _: out.pow(2).mean(), BN_NET
    from dpviz.engine.workloads import build_workload, compute_loss, rank_batch

    own = build_workload(cfg.replace(seed=cfg.seed + rank))    # rank r: seed + r, its own init

    def batch(step):
        x, y = rank_batch(cfg, own, step, 0, rank)
        return (x + shift * rank if x.is_floating_point() else x), y

    return own.model, batch, lambda out, y: compute_loss(own, out, y), own.name


def _state_diffs(model, when: str) -> dict:
    """max |θ_r − θ_0| and max |buffer_r − buffer_0| over ranks (collective)."""
    return {f"param_{when}": max_diff_vs_rank0(_flat(model.parameters())),
            f"buffer_{when}": _buffer_diff(model)}


def _train(ddp, batch, loss, steps: int) -> tuple[list[float], list[float]]:
    """SGD steps on this rank's data: the first BatchNorm's mean running mean after each step,
    and max |buffer_r − buffer_0| of the buffers each forward starts from — after DDP's
    pre-forward broadcast, before BatchNorm updates them (a pre-hook on the inner module runs
    between the two). Both empty for a model without them."""
    import torch

    model, seen, running = ddp.module, [], []
    hook = model.register_forward_pre_hook(lambda m, _: seen.append(_flat(m.buffers()).clone()))
    bn = _first_batchnorm(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(steps):
        x, y = batch(step)
        loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if bn is not None:
            running.append(float(bn.running_mean.mean()))
    hook.remove()
    return running, [max_diff_vs_rank0(b) for b in seen] if seen[0].numel() else []


def _save_on_rank0_load_everywhere(ctx: RankContext, ddp) -> dict:
    """Rank 0 writes the inner module's state, a barrier, every rank loads it and compares
    with its own: max |loaded − own| over parameters and over buffers (None: no buffers)."""
    import os

    import torch
    import torch.distributed as dist

    path = os.path.join(ctx.workdir, "checkpoint.pt")
    wrote = ctx.rank == 0
    if wrote:
        torch.save(ddp.module.state_dict(), path)              # .module: keys without "module."
    dist.barrier()                                             # nobody reads before it is written
    state = torch.load(path, map_location="cpu", weights_only=True)
    own = ddp.module.state_dict()
    params = {n for n, _ in ddp.module.named_parameters()}
    diff = lambda k: float((state[k].float() - own[k].float()).abs().max())
    buffers = [diff(k) for k in own if k not in params]
    dist.barrier()
    size = os.path.getsize(path) if wrote else 0
    if wrote:
        os.remove(path)
    return dict(wrote=wrote, bytes=size, keys=list(state), load_param=max(map(diff, params)),
                load_buffer=max(buffers) if buffers else None)


def lifecycle_rank(ctx: RankContext, cfg, width: int, steps: int, forward_sync_buffers: bool,
                   shift: float, seed: int, paths: list[str]) -> dict:
    """Different init per rank → DDP(...) → train on shifted data → rank 0 saves → all load."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpviz.engine.torch_gate import ddp_syncing_buffers
    from dpviz.engine.workloads import describe_workload, use_import_path

    use_import_path(list(paths))
    model, batch, loss, name = _rank_model(cfg, width, seed, shift, ctx.rank)  # 1) own model
    for b in model.buffers():                                  #    and own buffers: + rank
        if b.is_floating_point():
            b.add_(float(ctx.rank))
    weight = next(p for p in model.parameters() if p.dim() >= 2)
    before, diffs = weight.reshape(-1)[:6].tolist(), _state_diffs(model, "before")  # a few to draw
    ddp = ddp_syncing_buffers(DDP, model, forward_sync_buffers)  # 2) broadcasts rank 0's state
    after, diffs = weight.reshape(-1)[:6].tolist(), {**diffs, **_state_diffs(model, "after")}
    running, at_forward = _train(ddp, batch, loss, steps)      # 3) train on rank-shifted inputs
    return dict(before=before, after=after, diffs=diffs, at_forward=at_forward, running=running,
                **_save_on_rank0_load_everywhere(ctx, ddp),    # 4) only rank 0 writes
                workload=describe_workload(model, name) if ctx.rank == 0 else None)


def ddp_lifecycle(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                  world_size: int = 2, forward_sync_buffers: bool = True, steps: int = 20,
                  width: int | None = None, shift: float = 1.0, seed: int | None = None) -> Lifecycle:
    """Run one DDP life on every rank of the warm `cluster`, or of `world_size` fresh ranks
    (see `lifecycle_rank`). Without `cfg` the model is `bn_net(width)` (BatchNorm on the raw
    inputs, so its running mean follows the data's mean r · shift); with it, the workload
    `cfg.model` at `cfg`'s sizes, each rank seeded `cfg.seed + rank`, on its slice of the batch."""
    if cfg is not None and (width is not None or seed is not None):
        raise ValueError("with a cfg the model's width and seed are cfg.width and cfg.seed: "
                         "leave width and seed out")
    width, seed = 8 if width is None else width, 0 if seed is None else seed
    if steps < 1 or width < 1:
        raise ValueError(f"steps and width must be >= 1, got steps={steps}, width={width}")
    from dpviz.engine.workloads import import_path, validate_model_spec

    n = cluster.world_size if cluster is not None else world_size
    if cfg is not None:
        cfg = validate(cfg).replace(world_size=n)
        validate_model_spec(cfg.model, seed=cfg.seed)   # a user's model fails here, before any rank
    with using_cluster(cluster, n) as ranks:
        res = ranks.run_task(lifecycle_rank, cfg, width, steps, forward_sync_buffers,
                             float(shift), seed, import_path())
    return _lifecycle_record(res, forward_sync_buffers, float(shift))


def _lifecycle_record(res: list[dict], forward_sync_buffers: bool, shift: float) -> Lifecycle:
    """The ranks' results as one record."""
    d = res[0]["diffs"]
    no_buffers = d["buffer_before"] is None
    return Lifecycle(
        forward_sync_buffers=forward_sync_buffers, data_shift=shift,
        weights_before=tuple(tuple(r["before"]) for r in res),
        weights_after=tuple(tuple(r["after"]) for r in res),
        param_diff_before=d["param_before"], param_diff_after=d["param_after"],
        buffer_diff_before=d["buffer_before"], buffer_diff_after=d["buffer_after"],
        running_mean=tuple(tuple(r["running"]) for r in res),
        saved_by=tuple(r for r, x in enumerate(res) if x["wrote"]),
        checkpoint_bytes=sum(r["bytes"] for r in res), checkpoint_keys=tuple(res[0]["keys"]),
        load_param_diff=tuple(r["load_param"] for r in res),
        load_buffer_diff=() if no_buffers else tuple(r["load_buffer"] for r in res),
        buffer_diff_at_forward=tuple(res[0]["at_forward"]), workload=res[0]["workload"])

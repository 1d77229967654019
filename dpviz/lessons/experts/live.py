"""Expert (MoE) parallelism on live ranks: one expert per rank, tokens travel to their expert.

A mixture-of-experts layer replaces one MLP with E of them and a router that sends each token
to one (top-1, as in Switch Transformer): parameters grow E-fold, compute per token does not.
Expert parallelism puts expert e on rank e. Each rank routes its own tokens, then

1. *dispatch*: `dist.all_to_all_single` sends every token to its expert's rank (first the
   per-expert counts, so each rank knows how much it will receive — the splits are uneven);
2. each rank runs its expert on whatever arrived, from every rank;
3. *combine*: a second all-to-all sends the results back; each rank restores its token order
   and scales each result by the router's probability for the chosen expert.

The output must equal one process holding the router and all E experts (checked per rank).
What the record shows is what expert parallelism costs and risks: bytes every rank sends and
receives twice per layer, and load balance — a router that favours one expert sends it more
tokens, and that rank becomes the straggler everyone waits for. The record types (no torch)
are `dpviz.lessons.experts.records`; this module runs the ranks.
"""
from __future__ import annotations

from dpviz.core.config import require_int
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.experts.records import ExpertLayerRun, ExpertParallelRecord

FACADE = ("run_expert_layer", "expert_parallel")  # what `dpviz.<name>` offers from here


def _moe_weights(d_model: int, hidden: int, experts: int, seed: int):
    """Router and every expert, from the seed: any rank can rebuild the one-process model."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    router = nn.Linear(d_model, experts)
    mlps = [nn.Sequential(nn.Linear(d_model, hidden), nn.ReLU(), nn.Linear(hidden, d_model))
            for _ in range(experts)]
    return router, mlps


def _route(router, x, skew: float):
    """Top-1 routing: chosen expert and its softmax probability per token."""
    import torch

    logits = router(x)
    logits[:, 0] += skew
    probs = torch.softmax(logits, dim=-1)
    gate, expert = probs.max(dim=-1)
    return expert, gate


def single_process_moe(router, mlps, x, skew: float):
    """The reference: every token through its chosen expert, in one process."""
    import torch

    expert, gate = _route(router, x, skew)
    out = torch.zeros_like(x)
    for e, mlp in enumerate(mlps):
        mask = expert == e
        out[mask] = mlp(x[mask])
    return out * gate.unsqueeze(-1)


def expert_layer_rank(ctx: RankContext, tokens: int, d_model: int, hidden: int, skew: float,
                      seed: int) -> dict:
    """Route this rank's tokens, all-to-all them to their experts, run, all-to-all back."""
    import time

    import torch
    import torch.distributed as dist

    E = ctx.world_size
    router, mlps = _moe_weights(d_model, hidden, E, seed)
    mine = mlps[ctx.rank]                                  # the only expert this rank runs
    gen = torch.Generator().manual_seed(seed * 7919 + ctx.rank)
    x = torch.randn(tokens, d_model, generator=gen)
    with torch.no_grad():
        expert, gate = _route(router, x, skew)
        order = torch.argsort(expert, stable=True)         # tokens grouped by destination rank
        send_counts = torch.bincount(expert, minlength=E)
        recv_counts = torch.empty_like(send_counts)
        t0 = time.perf_counter()
        dist.all_to_all_single(recv_counts, send_counts)   # who will send me how many tokens
        send_split, recv_split = send_counts.tolist(), recv_counts.tolist()
        arrived = x.new_empty(sum(recv_split), d_model)
        dist.all_to_all_single(arrived, x[order].contiguous(), recv_split, send_split)
        t1 = time.perf_counter()
        done = mine(arrived)                               # tokens from every rank, one expert
        t2 = time.perf_counter()
        back = x.new_empty(tokens, d_model)
        dist.all_to_all_single(back, done, send_split, recv_split)
        t3 = time.perf_counter()
        out = torch.empty_like(x)
        out[order] = back                                  # undo the grouping
        out *= gate.unsqueeze(-1)
        ref = single_process_moe(router, mlps, x, skew)
    elem = x.element_size() * d_model
    off_send = sum(c for r, c in enumerate(send_split) if r != ctx.rank)
    off_recv = sum(c for r, c in enumerate(recv_split) if r != ctx.rank)
    return dict(send_counts=send_split, dispatch_bytes=off_send * elem, diff=float((out - ref).abs().max()),
                ref_max=float(ref.abs().max()),
                bytes_sent=(off_send + off_recv) * elem,        # dispatch out + combine out
                bytes_received=(off_recv + off_send) * elem,
                exchange_ms=((t1 - t0) + (t3 - t2)) * 1e3)


def check_layer(experts: int, tokens: int, d_model: int, hidden: int, skews) -> None:
    """Everything an expert layer checks before its ranks start (one expert per rank)."""
    if experts < 2:
        raise ValueError("expert parallelism needs at least 2 ranks (one expert per rank)")
    for name, v in (("tokens", tokens), ("d_model", d_model), ("hidden", hidden)):
        require_int(name, v, 1)
    for s in skews:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not abs(s) < float("inf"):
            raise ValueError(f"a router's skew is a finite number (0 = unbiased), got {s!r}")


def run_expert_layer(*, cluster: Cluster | None = None, world_size: int = 2, tokens: int = 256,
                     d_model: int = 64, hidden: int = 128, skew: float = 0.0,
                     seed: int = 0) -> ExpertLayerRun:
    """One MoE layer forward on the cluster's ranks (experts = ranks; without a cluster,
    `world_size` fresh ones)."""
    check_layer(cluster.world_size if cluster is not None else world_size, tokens, d_model, hidden, (skew,))
    with using_cluster(cluster, world_size) as ranks:
        res = ranks.run_task(expert_layer_rank, tokens, d_model, hidden, float(skew), seed)
    return ExpertLayerRun(skew=float(skew), tokens_per_rank=tokens, d_model=d_model,
                          sent_tokens=tuple(tuple(r["send_counts"]) for r in res),
                          bytes_sent=tuple(r["bytes_sent"] for r in res),
                          dispatch_bytes_sent=tuple(r["dispatch_bytes"] for r in res),
                          bytes_received=tuple(r["bytes_received"] for r in res),
                          max_diff_vs_single_process=max(r["diff"] for r in res),
                          exchange_ms=tuple(r["exchange_ms"] for r in res),
                          reference_max_abs=max(r["ref_max"] for r in res))


def rounding_bound(record: ExpertParallelRecord, run: ExpertLayerRun) -> float:
    """How far the expert-parallel output may differ from one process's by float32 rounding:
    an expert sees its tokens in another batch, so its kernels may sum in another order — a dot
    product over d_model, then over hidden, then the gate's product (dpviz.core.rounding)."""
    from dpviz.core.rounding import sum_order_bound

    c = record.config
    return sum_order_bound(c["d_model"] + c["hidden"] + 1, run.reference_max_abs)


def expert_parallel(*, cluster: Cluster | None = None, world_size: int = 2, skews=(0.0, 2.0),
                    tokens: int = 256, d_model: int = 64, hidden: int = 128,
                    seed: int = 0) -> ExpertParallelRecord:
    """The same layer under routers of increasing bias towards expert 0."""
    check_layer(cluster.world_size if cluster is not None else world_size, tokens, d_model, hidden, skews)
    with using_cluster(cluster, world_size) as ranks:
        runs = tuple(run_expert_layer(cluster=ranks, tokens=tokens, d_model=d_model, hidden=hidden,
                                      skew=s, seed=seed) for s in skews)
        world_size = ranks.world_size
    return ExpertParallelRecord(config=dict(world_size=world_size, tokens_per_rank=tokens,
                                            d_model=d_model, hidden=hidden, seed=seed),
                                runs=runs)

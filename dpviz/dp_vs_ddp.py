"""DP vs DDP: gather to one device, update there, send back — against DDP's all-reduce.

`nn.DataParallel` runs one process over several GPUs: it scatters the batch, replicates the
model from GPU 0, gathers the gradients on GPU 0, updates there, and GPU 0 feeds everyone
again. On CPU it has no devices to spread over, so we run the same data flow on live ranks:
rank 0 plays GPU 0 (a parameter server), each other rank sends its gradient to rank 0 and
receives the new parameters from it. DDP instead all-reduces the gradients, and every rank
updates its own copy.

Traffic is *measured*, not counted: the bytes this rank's process wrote to its sockets during
a step (`wchar` of /proc/self/io; gloo sends with write calls, nothing else writes then).
Only sent bytes are visible this way; what a rank receives mirrors what the others send.
World sizes 2 … N are measured on subgroups of one warm N-rank cluster.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .config import RunConfig, validate
from .launch import Cluster, RankContext

PATTERNS = ("dp", "ddp")


@dataclass(frozen=True)
class StepTraffic:
    """One rank, one pattern, one world size: median step time and bytes it sent per step."""

    pattern: str            # "dp" (gather to rank 0, update, send back) or "ddp" (all-reduce)
    world_size: int
    rank: int
    step_ms: float          # median over the measured steps (wall clock, under load here)
    sent_bytes: float       # mean bytes written to sockets per step


@dataclass(frozen=True)
class DpVsDdp:
    """Both patterns at several world sizes, with the check that they train identically."""

    config: dict
    param_bytes: int                     # P: one full gradient or parameter copy
    points: tuple[StepTraffic, ...]
    max_param_diff: dict[int, float]     # world size → max |θ_dp − θ_ddp| after training

    def of(self, pattern: str, world_size: int | None = None) -> list[StepTraffic]:
        return [p for p in self.points if p.pattern == pattern
                and (world_size is None or p.world_size == world_size)]


def expected_sent_bytes(pattern: str, world_size: int, rank: int, param_bytes: int) -> float:
    """The model: rank 0 sends N−1 parameter copies in DP; a ring all-reduce sends 2(N−1)/N·P."""
    if pattern == "dp":
        return float((world_size - 1) * param_bytes if rank == 0 else param_bytes)
    if pattern == "ddp":
        return 2 * (world_size - 1) / world_size * param_bytes
    raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")


def _sent_bytes() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("wchar:")).split()[1])


def _dp_step(rank: int, world: int, group, model, opt, x, y) -> None:
    """DP data flow: gradient to rank 0, rank 0 averages and updates, parameters back."""
    import torch
    import torch.distributed as dist
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    from .workloads import loss_fn

    loss_fn(model(x), y).backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    if rank == 0:
        inbox = [torch.empty_like(grad) for _ in range(1, world)]
        for work in [dist.irecv(buf, src, group=group) for src, buf in enumerate(inbox, start=1)]:
            work.wait()
        total = grad + sum(inbox)
        vector_to_parameters(total / world, [p.grad for p in model.parameters()])
        opt.step()                                     # the only optimizer step in the job
        params = parameters_to_vector(model.parameters()).detach()
        for work in [dist.isend(params, dst, group=group) for dst in range(1, world)]:
            work.wait()
    else:
        dist.send(grad, 0, group=group)
        params = torch.empty_like(grad)
        dist.recv(params, 0, group=group)
        with torch.no_grad():
            vector_to_parameters(params, model.parameters())
    model.zero_grad(set_to_none=True)


def _ddp_step(ddp, opt, x, y) -> None:
    from .workloads import loss_fn

    loss_fn(ddp(x), y).backward()                      # all-reduce of the buckets happens here
    opt.step()
    opt.zero_grad(set_to_none=True)


def _measure_group(rank: int, world: int, group, cfg: RunConfig, steps: int) -> dict:
    """Both patterns on the first `world` ranks (group ranks = global ranks 0 … world − 1)."""
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.nn.utils import parameters_to_vector

    from .workloads import build_mlp, rank_batch

    cfg = cfg.replace(world_size=world)                # each rank's slice of the global batch
    out, final = {}, {}
    for pattern in PATTERNS:
        model = build_mlp(cfg)
        net = (DDP(model, bucket_cap_mb=cfg.bucket_cap_mb, process_group=group)
               if pattern == "ddp" else model)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        ms, sent = [], []
        for step in range(steps + 1):                  # step 0: warm-up (DDP rebuilds buckets)
            x, y = rank_batch(cfg, step, 0, rank)
            dist.barrier(group=group)                  # every rank starts the step together
            w0, t0 = _sent_bytes(), time.perf_counter()
            if pattern == "dp":
                _dp_step(rank, world, group, model, opt, x, y)
            else:
                _ddp_step(net, opt, x, y)
            t1, w1 = time.perf_counter(), _sent_bytes()
            if step:
                ms.append((t1 - t0) * 1e3)
                sent.append(w1 - w0)
        out[pattern] = dict(step_ms=statistics.median(ms), sent_bytes=statistics.mean(sent))
        final[pattern] = parameters_to_vector(model.parameters()).detach()
    return dict(patterns=out, max_param_diff=float((final["dp"] - final["ddp"]).abs().max()),
                param_bytes=int(final["dp"].numel() * final["dp"].element_size()))


def dp_vs_ddp_rank(ctx: RankContext, cfg: RunConfig, steps: int, world_sizes) -> dict:
    """For each world size n, ranks 0 … n−1 train the workload both ways; the others wait.

    One warm cluster of max(world_sizes) ranks serves every n through a process subgroup, so
    no ranks are started per point.
    """
    import torch.distributed as dist

    out = {}
    for n in world_sizes:
        group = dist.new_group(list(range(n)))         # collective: every rank creates it
        if ctx.rank < n:
            out[n] = _measure_group(ctx.rank, n, group, cfg, steps)
        dist.barrier()
        dist.destroy_process_group(group)
    return out


def dp_vs_ddp(cluster: Cluster, world_sizes=(2, 3, 4), cfg: RunConfig | None = None,
              steps: int = 4) -> DpVsDdp:
    """Measure both patterns at each world size, on subgroups of the cluster's ranks."""
    cfg = validate(cfg or RunConfig(layers=2, width=512, batch_per_rank=16))
    world_sizes = tuple(world_sizes)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not world_sizes or min(world_sizes) < 2 or max(world_sizes) > cluster.world_size:
        raise ValueError(f"world sizes must be between 2 and the cluster's {cluster.world_size} "
                         f"ranks, got {list(world_sizes)}: start a larger Cluster")
    res = cluster.run_task(dp_vs_ddp_rank, cfg, steps, world_sizes)
    points = [StepTraffic(pattern=p, world_size=n, rank=r, **res[r][n]["patterns"][p])
              for n in world_sizes for p in PATTERNS for r in range(n)]
    return DpVsDdp(config=cfg.to_dict(), param_bytes=res[0][world_sizes[0]]["param_bytes"],
                   points=tuple(points),
                   max_param_diff={n: max(res[r][n]["max_param_diff"] for r in range(n))
                                   for n in world_sizes})

"""DP vs DDP: one process over N devices, a parameter server on ranks, and DDP's all-reduce.

Three ways to train one model on N workers, same model, same batches, same result:

* **dp** — `nn.DataParallel`'s algorithm in one process with N model replicas (the "devices"):
  scatter, replicate, N forwards in N threads, gather and loss on device 0, one backward that
  sums every replica's gradient onto device 0, which alone steps (`data_parallel.py`; every byte
  crossing device 0's boundary is counted by direction).
* **ps** — a parameter server on ranks: rank 0 receives every rank's gradient, steps the only
  optimizer and sends the parameters back (DataParallel's data flow, spread over processes).
* **ddp** — DDP: the gradients are all-reduced and every rank steps its own optimizer.

Rank traffic is *measured*, not counted: the bytes this rank's process wrote to its sockets
during a step (`wchar` of /proc/self/io; gloo sends with write calls, nothing else writes
then). Only sent bytes are visible this way; what a rank receives mirrors what the others send.
World sizes 2 … N are measured on subgroups of one warm N-rank cluster.
"""
from __future__ import annotations

import statistics

from dpviz.core.config import RunConfig, validate_mlp_only
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.dp_vs_ddp.data_parallel import data_parallel
from dpviz.lessons.dp_vs_ddp.records import DeviceStep, DpVsDdp, RANK_PATTERNS, StepTraffic, WARMUP

# --- the rank patterns: parameter server and DDP ---------------------------------------------

def _sent_bytes() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("wchar:")).split()[1])


def _ps_step(rank: int, world: int, group, model, opt, x, y) -> None:
    """Parameter server: gradient to rank 0, rank 0 averages and updates, parameters back."""
    import torch
    import torch.distributed as dist
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    from dpviz.engine.workloads import loss_fn

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
    from dpviz.engine.workloads import loss_fn

    loss_fn(ddp(x), y).backward()                      # all-reduce of the buckets happens here
    opt.step()
    opt.zero_grad(set_to_none=True)


def _compute_alone_ms(rank: int, group, cfg: RunConfig, steps: int) -> float:
    """DDP's step without DDP: the same model, batch and optimizer on the same ranks, started
    together as DDP's steps are, but nothing communicated. The median step time: what DDP's
    step would take if its all-reduces cost nothing, with the cores shared as in DDP's run."""
    import time

    import torch
    import torch.distributed as dist

    from dpviz.engine.workloads import build_mlp, loss_fn, rank_batch

    model = build_mlp(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    ms = []
    for step in range(WARMUP + steps):
        x, y = rank_batch(cfg, None, step, 0, rank)
        dist.barrier(group=group)
        t0 = time.perf_counter()
        loss_fn(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= WARMUP:
            ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def _measure_group(rank: int, world: int, group, cfg: RunConfig, steps: int) -> dict:
    """Both rank patterns on the first `world` ranks (group ranks = global ranks 0 … world − 1)."""
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.nn.utils import parameters_to_vector

    from dpviz.engine.workloads import build_mlp, rank_batch

    cfg = cfg.replace(world_size=world)                # each rank's slice of the global batch
    out, final = {}, {}
    for pattern in RANK_PATTERNS:
        model = build_mlp(cfg)
        net = (DDP(model, bucket_cap_mb=cfg.bucket_cap_mb, process_group=group)
               if pattern == "ddp" else model)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        ms, sent = [], []
        for step in range(WARMUP + steps):             # warm-up first (DDP rebuilds buckets)
            x, y = rank_batch(cfg, None, step, 0, rank)
            dist.barrier(group=group)                  # every rank starts the step together
            w0, t0 = _sent_bytes(), time.perf_counter()
            if pattern == "ps":
                _ps_step(rank, world, group, model, opt, x, y)
            else:
                _ddp_step(net, opt, x, y)
            t1, w1 = time.perf_counter(), _sent_bytes()
            if step >= WARMUP:
                ms.append((t1 - t0) * 1e3)
                sent.append(w1 - w0)
        out[pattern] = dict(step_ms=statistics.median(ms), sent_bytes=statistics.mean(sent))
        final[pattern] = parameters_to_vector(model.parameters()).detach()
    out["ddp"]["compute_ms"] = _compute_alone_ms(rank, group, cfg, steps)
    res = dict(patterns=out, max_param_diff=float((final["ps"] - final["ddp"]).abs().max()),
               param_bytes=int(final["ddp"].numel() * final["ddp"].element_size()))
    if rank == 0:                                      # DDP's parameters, for the DP comparison
        res["ddp_params"] = final["ddp"].numpy().tobytes()
    return res


def dp_vs_ddp_rank(ctx: RankContext, cfg: RunConfig, steps: int, world_sizes) -> dict:
    """For each world size n, ranks 0 … n−1 train both rank patterns; the others wait.

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


def dp_vs_ddp(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
              world_sizes=(2, 3, 4), steps: int = 4, replicas=(1, 2, 3, 4)) -> DpVsDdp:
    """Measure the rank patterns at each world size on subgroups of the warm `cluster`'s ranks
    (or of max(world_sizes) fresh ones), and single-process DP in this process at each replica
    count; check all three train alike."""
    import torch

    cfg = validate_mlp_only(cfg or RunConfig(layers=2, width=512, batch_per_rank=16), "dp_vs_ddp")
    world_sizes, replicas = tuple(world_sizes), tuple(replicas)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    largest = cluster.world_size if cluster is not None else max(world_sizes, default=0)
    if not world_sizes or min(world_sizes) < 2 or max(world_sizes) > largest:
        raise ValueError(f"world sizes must be between 2 and the cluster's {largest} "
                         f"ranks, got {list(world_sizes)}: start a larger Cluster")
    if any(r < 1 for r in replicas):
        raise ValueError(f"replica counts must be >= 1, got {list(replicas)}")
    with using_cluster(cluster, largest, cfg.backend, cfg.timeout_s) as ranks:
        res = ranks.run_task(dp_vs_ddp_rank, cfg, steps, world_sizes)
    points = [StepTraffic(pattern=p, world_size=n, rank=r, **res[r][n]["patterns"][p])
              for n in world_sizes for p in RANK_PATTERNS for r in range(n)]
    devices = []
    for n in replicas:
        dev, final = data_parallel(cfg, n, steps)
        if n in world_sizes:
            ddp = torch.frombuffer(bytearray(res[0][n]["ddp_params"]), dtype=final.dtype)
            dev = DeviceStep(**{**dev.__dict__,
                                "max_diff_vs_ddp": float((final - ddp).abs().max())})
        devices.append(dev)
    return DpVsDdp(config=cfg.to_dict(), param_bytes=res[0][world_sizes[0]]["param_bytes"],
                   shard_bytes=cfg.batch_per_rank * cfg.width * 4,
                   output_bytes=cfg.batch_per_rank * 1 * 4,        # the MLP's head: one float
                   points=tuple(points),
                   max_param_diff={n: max(res[r][n]["max_param_diff"] for r in range(n))
                                   for n in world_sizes},
                   single_process=tuple(devices))

"""Pipeline parallelism on live ranks: one MLP stage per rank, micro-batches, the bubble.

Each rank holds a contiguous slice of the workload MLP (a *stage*). The batch is cut into m
micro-batches; a stage receives a micro-batch's activations from the previous rank, runs its
layers and sends the result on (`dist.isend`/`dist.recv`, gloo); in backward the gradient
w.r.t. each stage's input travels the other way. Every rank stamps the start and end of each
micro-batch's forward and backward with `time.perf_counter()` — CLOCK_MONOTONIC, one clock for
all processes on Linux — so the stamps of all ranks land on one timeline (the tests check it by
causality: a stage never starts micro-batch i before its neighbour finished it).

Two schedules, same work, same gradients:

* GPipe ("F-then-B"): all m forwards, then all m backwards. Idle fraction per rank
  (p−1)/(m+p−1) when every stage costs the same: more micro-batches, smaller bubble — but a
  stage holds the activations of all m micro-batches at once.
* 1F1B (PipeDream-Flush): after p−1−s warm-up forwards, stage s alternates one forward and one
  backward. Same bubble, but at most p−s micro-batches are in flight: less activation memory.

Rank-side functions (`*_rank`) run via `Cluster.run_task` and return plain data; the parent
assembles frozen records that render without torch (`dpviz.lessons.pipeline.records`, with the
schedules and the bubble formula).
"""
from __future__ import annotations

from dpviz.core.config import RunConfig, require_int, validate_mlp_only
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.pipeline.records import (
    PipelineRun, PipelineStep, PipelineSweep, SCHEDULES, StageEvent, schedule_ops, stage_blocks,
)

FACADE = ("run_pipeline", "sweep_pipeline")  # what `dpviz.<name>` offers from here

# --- on each rank -------------------------------------------------------------------------------

def _stage_slice(model, blocks: range, last: bool):
    """A stage's modules of the whole MLP (2 modules per block; the head is the last module)."""
    from torch import nn

    mods = list(model)
    return nn.Sequential(*mods[2 * blocks.start:2 * blocks.stop], *(mods[-1:] if last else []))


class _Stage:
    """One rank's pipeline stage (rank side): its slice of the MLP, the micro-batches, what it
    holds for backward (and the peaks of that over every step)."""

    def __init__(self, ctx: RankContext, cfg: RunConfig, micro_batches: int):
        from dpviz.engine.workloads import build_mlp, global_batch

        self.cfg, self.s, self.p, self.m = cfg, ctx.rank, ctx.world_size, micro_batches
        self.blocks = stage_blocks(cfg.layers, self.p)[self.s]
        # built whole from the seed and sliced: every stage's weights are the one-process model's
        self.module = _stage_slice(build_mlp(cfg), self.blocks, last=self.s == self.p - 1)
        self.x_all, self.y_all = global_batch(cfg.replace(world_size=1), 0, 0)
        self.xs, self.ys = self.x_all.tensor_split(micro_batches), self.y_all.tensor_split(micro_batches)
        self.batch = self.x_all.shape[0]
        self.peak_in_flight, self.peak_saved = 0, 0

    def step(self, ops) -> list[tuple]:
        """One forward+backward of every micro-batch in the schedule's order; each op timed."""
        import torch.distributed as dist

        self.module.zero_grad(set_to_none=True)
        self.inputs, self.outputs, self.saved, self.pending, events = {}, {}, {}, [], []
        self.held, self.held_bytes = set(), 0
        dist.barrier()
        for kind, i in ops:
            t0, t1 = self.forward(i) if kind == "F" else self.backward(i)
            events.append(("forward" if kind == "F" else "backward", i, t0, t1))
        for work in self.pending:
            work.wait()
        return events

    def forward(self, i: int) -> tuple[float, float]:
        """Receive micro-batch i (or take it, on stage 0), run the slice, send the output on."""
        import time

        import torch
        import torch.distributed as dist

        from dpviz.lessons.memory.live import saved_activation_bytes
        from dpviz.engine.workloads import loss_fn

        s, p = self.s, self.p
        if s == 0:
            x = self.xs[i].clone()
        else:
            x = torch.empty(self.xs[i].shape[0], self.cfg.width)
            dist.recv(x, src=s - 1, tag=i)
        x.requires_grad_(s > 0)
        t0 = time.perf_counter()
        out, self.saved[i] = saved_activation_bytes(self.module, x)   # what the stage keeps for backward
        if s == p - 1:   # micro-batch i's share of the full-batch mean loss
            out = loss_fn(out, self.ys[i]) * (self.xs[i].shape[0] / self.batch)
        t1 = time.perf_counter()
        if s < p - 1:
            self.pending.append(dist.isend(out.detach(), dst=s + 1, tag=i))
        self.inputs[i], self.outputs[i] = x, out
        self.held.add(i)
        self.held_bytes += self.saved[i]
        self.peak_in_flight = max(self.peak_in_flight, len(self.held))
        self.peak_saved = max(self.peak_saved, self.held_bytes)
        return t0, t1

    def backward(self, i: int) -> tuple[float, float]:
        """Receive micro-batch i's output gradient (the last stage has its loss), backward,
        send the input's gradient back."""
        import time

        import torch
        import torch.distributed as dist

        s, p, m = self.s, self.p, self.m
        grad = None
        if s < p - 1:
            grad = torch.empty_like(self.outputs[i])
            dist.recv(grad, src=s + 1, tag=m + i)
        t0 = time.perf_counter()
        self.outputs[i].backward(grad)
        t1 = time.perf_counter()
        if s > 0:
            self.pending.append(dist.isend(self.inputs[i].grad, dst=s - 1, tag=m + i))
        self.held.discard(i)
        self.held_bytes -= self.saved[i]
        del self.outputs[i]
        return t0, t1

    def grad_diff(self) -> float:
        """Largest gap between this stage's gradients and one process's (the whole MLP, the
        whole batch, same weights)."""
        from dpviz.engine.workloads import build_mlp, loss_fn

        mine = [q.grad.reshape(-1) for q in self.module.parameters()]
        ref = build_mlp(self.cfg)
        loss_fn(ref(self.x_all), self.y_all).backward()
        theirs = [q.grad.reshape(-1) for q in _stage_slice(ref, self.blocks, last=self.s == self.p - 1).parameters()]
        return max(float((a - b).abs().max()) for a, b in zip(mine, theirs))


def pipeline_rank(ctx: RankContext, cfg: RunConfig, schedule: str, micro_batches: int,
                  repeats: int) -> dict:
    """Run `repeats` (+1 warm-up) pipelined forward+backward steps; time every op."""
    stage = _Stage(ctx, cfg, micro_batches)
    ops = schedule_ops(schedule, ctx.rank, ctx.world_size, micro_batches)
    steps = [stage.step(ops) for _ in range(repeats + 1)][1:]   # step 0 warms up allocator and gloo pairs
    return dict(steps=steps, grad_diff=stage.grad_diff(), peak_in_flight=stage.peak_in_flight,
                peak_saved=stage.peak_saved, batch=stage.batch)


# --- in the parent ------------------------------------------------------------------------------

def _assemble_step(per_rank_events: list[list]) -> PipelineStep:
    t0 = min(e[2] for evs in per_rank_events for e in evs)
    t1 = max(e[3] for evs in per_rank_events for e in evs)
    makespan = (t1 - t0) * 1e3
    events, busy = [], []
    for rank, evs in enumerate(per_rank_events):
        events += [StageEvent(rank, kind, i, (a - t0) * 1e3, (b - t0) * 1e3) for kind, i, a, b in evs]
        busy.append(sum(b - a for _, _, a, b in evs) * 1e3)
    return PipelineStep(events=tuple(events), makespan_ms=makespan, busy_ms=tuple(busy),
                        bubble=tuple(1 - b / makespan for b in busy))


def check_pipeline(cfg: RunConfig, stages: int, micro_batches: int, schedule: str, repeats: int) -> None:
    """Everything a pipeline run checks before its ranks start (one stage per rank)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    require_int("micro_batches", micro_batches, 1)
    if micro_batches > cfg.batch_per_rank:
        raise ValueError(f"{micro_batches} micro-batches of a {cfg.batch_per_rank}-sample batch "
                         "would leave some empty")
    require_int("repeats", repeats, 1)
    stage_blocks(cfg.layers, stages)     # enough blocks for every stage


def run_pipeline(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                 micro_batches: int = 4, schedule: str = "gpipe", repeats: int = 3) -> PipelineRun:
    """One schedule with m micro-batches on the cluster's ranks (one stage per rank; without
    a cluster, `cfg.world_size` fresh ranks)."""
    cfg = validate_mlp_only(cfg or default_config(), "the pipeline")
    check_pipeline(cfg, cluster.world_size if cluster is not None else cfg.world_size,
                   micro_batches, schedule, repeats)
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        stages = ranks.world_size
        blocks = stage_blocks(cfg.layers, stages)
        res = ranks.run_task(pipeline_rank, cfg, schedule, micro_batches, repeats)
    steps = tuple(_assemble_step([r["steps"][k] for r in res]) for k in range(repeats))
    return PipelineRun(schedule=schedule, stages=stages, micro_batches=micro_batches,
                       batch=res[0]["batch"], stage_blocks=tuple(tuple(b) for b in blocks),
                       steps=steps, max_grad_diff=max(r["grad_diff"] for r in res),
                       peak_in_flight=tuple(r["peak_in_flight"] for r in res),
                       peak_saved_bytes=tuple(r["peak_saved"] for r in res))


def rounding_bound(cfg: RunConfig) -> float:
    """How far a stage's gradient may differ from one process's by float32 re-ordering alone:
    the micro-batches split the batch sums (dpviz.core.rounding.gradient_bound)."""
    from dpviz.core.rounding import gradient_bound
    from dpviz.engine.workloads import reference_gradient_max

    whole = cfg.replace(world_size=1)          # the pipeline's batch is one process's batch
    return gradient_bound(whole, reference_gradient_max(whole))


def default_config() -> RunConfig:
    """Big enough that a micro-batch's compute outweighs a send (2 CPU ranks), small enough
    to sweep m in a few seconds. `batch_per_rank` is the whole pipeline's batch."""
    return RunConfig(layers=8, width=256, batch_per_rank=2048, profile=False)


def sweep_pipeline(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                   micro_batches=(1, 2, 4, 8), schedules=("gpipe",), repeats: int = 3) -> PipelineSweep:
    """Every schedule × m: measured bubble next to (p−1)/(m+p−1), gradients checked."""
    cfg = validate_mlp_only(cfg or default_config(), "the pipeline")
    for sched in schedules:
        for m in micro_batches:
            check_pipeline(cfg, cluster.world_size if cluster is not None else cfg.world_size,
                           m, sched, repeats)
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        runs = tuple(run_pipeline(cfg, cluster=ranks, micro_batches=m, schedule=sched, repeats=repeats)
                     for sched in schedules for m in micro_batches)
    return PipelineSweep(config=cfg.to_dict(), runs=runs)

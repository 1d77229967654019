"""A new DDP built with the buckets DDP's own rebuild would give it, so a slider's run needs
no warm-up step.

Why: DDP starts with one bucket holding every parameter, learns the order gradients become
ready in from its first synced backward, and rebuilds its buckets from that order at the
next forward. A slider draws a steady-state step, so each move used to run a light warm-up
first (`dpviz.ddp_run.warmup_step`): ~11 ms of a cap move's ~75 ms on the ranks. A built-in
model's ready order is fixed by its graph, so a warm rank learns it once, at the first
rebuild of a kept workload (`ready_order`), and every later DDP of that workload gets the
buckets torch's own assignment function makes from it (`steady_assignment`: the function
the rebuild calls, with the same size limits) at construction (`built_with`). A DDP built
so is never rebuilt in a run whose only synced backward is its last (`rebuilds_mid_run`).

The run side only (torch); tests/test_ddp_run.py compares such a run's buckets and spans
with a full run's steady-state step, and the assignment with DDP's rebuild at several caps.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

from .buckets.records import cap_limits
from .config import RunConfig

# torch's switch that makes the rebuild's last bucket small (reducer.cpp): a rebuild under it
# is not what steady_assignment computes, so a run then keeps its warm-up.
LAST_BUCKET_SWITCH = "DDP_SET_LAST_BUCKET_CAP"


def ready_order(ddp) -> list:
    """The parameters of a rebuilt DDP in the order their gradients became ready (its
    buckets' parameters, bucket by bucket: the rebuild keeps that order within a bucket)."""
    return [p for bucket in ddp.reducer._get_zeros_like_grad_buckets() for p in bucket.parameters()]


def rebuilds_mid_run(cfg: RunConfig) -> bool:
    """Would a DDP built with steady buckets still rebuild them during the profiled steps?
    DDP rebuilds at the first forward after a synced backward, once; a run whose profiled
    steps have one synced backward, the last thing they do (one step of one micro-step, or
    of K under `no_sync` around forward and backward), never reaches another forward."""
    per_step = 1 if cfg.accum_steps == 1 or cfg.no_sync == "forward_backward" else cfg.accum_steps
    return (cfg.steps - cfg.profile_from) * per_step > 1


def same_parameters(parameters: list, ready: list) -> bool:
    """Is `ready` an order of exactly these parameter tensors (the same objects)?"""
    return len(parameters) == len(ready) and {id(p) for p in parameters} == {id(p) for p in ready}


def steady_assignment(parameters: list, ready: list, bucket_cap_mb: float | None,
                      assign=None) -> tuple[list, list]:
    """(bucket indices into `parameters`, per-bucket size limits) of DDP's rebuild from the
    ready order `ready` at this cap, in the order the reducer holds its buckets: what torch's
    rebuild computes (`assign`, by default `torch.distributed._compute_bucket_assignment_by_size`,
    over the ready order, with the limits it rebuilds with: `dpviz.buckets.records.cap_limits`)."""
    import torch.distributed as dist

    assign = assign or dist._compute_bucket_assignment_by_size
    position = {id(p): i for i, p in enumerate(parameters)}
    indices, limits = assign(ready, cap_limits(bucket_cap_mb), [False] * len(ready),
                             [position[id(p)] for p in ready])
    return [list(b) for b in indices], list(limits)


@contextmanager
def built_with(ready: list | None, bucket_cap_mb: float | None):
    """Build a DDP inside this block to give it steady buckets from `ready` (None: DDP's own
    start); yields a one-item list, True after the block if the DDP got them. DDP's
    constructor asks `torch.distributed._compute_bucket_assignment_by_size` once for its
    initial buckets and reverses them; this answers that call with the steady assignment,
    pre-reversed. Any other call, or another number of calls (another torch), gets torch's
    own answer and leaves the flag False: the caller then warms up as before, and the
    warm-up's rebuild makes the buckets steady whatever they started as."""
    import torch.distributed as dist

    used = [False]
    if ready is None or os.environ.get(LAST_BUCKET_SWITCH):
        yield used
        return
    real, answered = dist._compute_bucket_assignment_by_size, []

    def answer(parameters, *args, **kwargs):
        if answered or not same_parameters(list(parameters), ready):
            answered.append(False)
            return real(parameters, *args, **kwargs)
        answered.append(True)
        indices, limits = steady_assignment(list(parameters), ready, bucket_cap_mb, real)
        return indices[::-1], limits[::-1]   # DDP reverses its initial buckets

    dist._compute_bucket_assignment_by_size = answer
    try:
        yield used
    finally:
        dist._compute_bucket_assignment_by_size = real
    used[0] = answered == [True]

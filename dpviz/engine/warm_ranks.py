"""What makes a slider's re-run on warm ranks fast, kept apart from the teaching path.

A slider re-runs one steady-state step on ranks that stay up between moves (`RunConfig.warmup
== "light"`, `config.for_slider`). Three things a plain run pays for every time are paid once:

- the workload: a built-in model is kept on the rank with its initial weights (`warm_workload`)
  and copied back before each run, bit for bit what a fresh build makes;
- DDP's start-up sync: where every rank already holds the same weights (`same_on_every_rank`)
  a light run builds DDP with `init_sync=False` (a plain run always syncs: `ddp_run.wrap_ddp`);
- DDP's bucket rebuild: DDP starts with one bucket, learns the order gradients become ready in
  from its first synced backward and rebuilds its buckets at the next forward. A built-in
  model's ready order is fixed by its graph, so a warm rank learns it once (`warmup_step`)
  and later DDPs of that workload start with the buckets the rebuild would make
  (`build_ddp`), so the drawn step is steady without a warm-up.

Rank side only (torch). tests/test_ddp_run.py compares such runs with a full run's steady
step; tests/test_torch_gate.py does so with each private torch call turned off.
"""
from __future__ import annotations

import collections
import dataclasses
import os
from typing import Callable

from dpviz.core.bucket_layout import cap_limits
from dpviz.core.config import RunConfig
from dpviz.engine import torch_gate

# torch's switch that makes the rebuild's last bucket small (reducer.cpp): a rebuild under it
# is not what steady_assignment computes, so a run then keeps its warm-up.
LAST_BUCKET_SWITCH = "DDP_SET_LAST_BUCKET_CAP"


@dataclasses.dataclass
class Kept:
    """A built-in workload kept on a warm rank (`warm_workload`), with what later runs reuse."""

    workload: object          # a dpviz.engine.workloads.Workload, its model on the rank's device
    initial: list             # its initial parameters and buffers, copied back before each run
    fingerprint: object       # `fingerprint(model)` of those, for `same_on_every_rank`
    ready: list | None = None  # its parameters in gradient-ready order, once a DDP rebuilt


# A warm rank's built-in workloads, by what builds them. A slider's moves re-run one
# workload; two entries let a notebook alternate two.
_WARM: "collections.OrderedDict[tuple, Kept]" = collections.OrderedDict()
WARM_ENTRIES, WARM_MAX_BYTES = 2, 64 << 20


def warm_workload(cfg: RunConfig, device):
    """(`build_workload(cfg)` on `device`, its `Kept` entry or None).

    A built-in workload is kept for the next run of the same one, which gets it back with its
    initial weights copied in (the same seeded init, copied), no gradients, and the fingerprint
    computed once. Kept by the fields a built-in's build reads (model, layers, width, seed,
    checkpoint_every), so a kept one cannot differ from a fresh one, and only up to
    WARM_MAX_BYTES. A user's model is built afresh every run: its factory may do anything
    (read files, count calls, seed by rank)."""
    import torch

    from dpviz.engine.workloads import BUILTIN, build_workload

    if cfg.model not in BUILTIN:
        workload = build_workload(cfg)
        return dataclasses.replace(workload, model=workload.model.to(device)), None
    key = (cfg.model, cfg.layers, cfg.width, cfg.seed, cfg.checkpoint_every, str(device))
    if key in _WARM:
        _WARM.move_to_end(key)
        kept = _WARM[key]
        with torch.no_grad():
            for tensor, start in zip(_state(kept.workload.model), kept.initial):
                tensor.copy_(start)
        for p in kept.workload.model.parameters():
            p.grad = None
        return kept.workload, kept
    workload = build_workload(RunConfig(model=cfg.model, layers=cfg.layers, width=cfg.width,
                                        seed=cfg.seed, checkpoint_every=cfg.checkpoint_every))
    workload = dataclasses.replace(workload, model=workload.model.to(device))
    initial = [t.detach().clone() for t in _state(workload.model)]
    if sum(t.numel() * t.element_size() for t in initial) > WARM_MAX_BYTES:
        return workload, None
    _WARM[key] = Kept(workload, initial, fingerprint(workload.model, device))
    while len(_WARM) > WARM_ENTRIES:
        _WARM.popitem(last=False)
    return workload, _WARM[key]


def _state(model) -> list:
    """A model's parameters and buffers, in a fixed order."""
    return [*model.parameters(), *model.buffers()]


# --- DDP's start-up sync -------------------------------------------------------------------

def same_on_every_rank(model, device, mine=None) -> bool:
    """Does every rank already hold the same parameters and buffers (shapes and bits)?

    DDP's start-up sync checks every shape across ranks and broadcasts rank 0's parameters;
    a slider's new DDP on weights every rank built from one seed need not. One all-gather of a
    fingerprint per rank (per tensor: its shape, the xor of its elements' bits,
    `torch.hash_tensor`, and the sum of its 32-bit words, since the xor alone calls an
    even-length run of zeros equal to one of ones) says whether they did; a false "differ"
    costs only the broadcast. If any rank differs, DDP syncs as usual and checks the shapes
    itself. `mine`: this rank's `fingerprint(model, device)` if already known."""
    import torch
    import torch.distributed as dist

    mine = fingerprint(model, device) if mine is None else mine
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return all(torch.equal(theirs, mine) for theirs in everyone)


def fingerprint(model, device):
    """A model's parameters and buffers (shapes and bits) as 3 numbers (`same_on_every_rank`)."""
    import torch

    tensors = [t.detach() for t in (*model.parameters(), *model.buffers()) if t.numel()]
    mixed = 0   # the tensors' (shape, bits) in order, mixed into one number (fixed size to gather)
    for t in tensors:
        bits = int(torch.hash_tensor(t).item()) + int(_words(t).sum(dtype=torch.int64))
        mixed = (mixed * 1_000_003 + hash(tuple(t.shape)) + bits) % (2**61 - 1)
    return torch.tensor([len(tensors), sum(t.numel() for t in tensors), mixed], device=device)


def _words(t):
    """A tensor's bytes as 32-bit words (bytes where its size is not a multiple of 4)."""
    import torch

    raw = t.contiguous().reshape(-1).view(torch.uint8)
    return raw.view(torch.int32) if raw.numel() % 4 == 0 else raw


# --- DDP's bucket rebuild, learned once ------------------------------------------------------

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
                      assign: Callable) -> tuple[list, list]:
    """(bucket indices into `parameters`, per-bucket size limits) of DDP's rebuild from the
    ready order `ready` at this cap, in the order the reducer holds its buckets: what torch's
    rebuild computes (`assign`: torch's assignment function, over the ready order, with the
    limits it rebuilds with: `dpviz.core.bucket_layout.cap_limits`)."""
    position = {id(p): i for i, p in enumerate(parameters)}
    indices, limits = assign(ready, cap_limits(bucket_cap_mb), [False] * len(ready),
                             [position[id(p)] for p in ready])
    return [list(b) for b in indices], list(limits)


def build_ddp(build: Callable[[], object], ready: list | None, bucket_cap_mb: float | None):
    """(`build()`'s DDP, whether it starts with the steady buckets of ready order `ready`).

    DDP's constructor asks torch's assignment function once for its initial buckets and
    reverses them; that call is answered with the steady assignment, pre-reversed. Any other
    call, another number of calls (another torch), or a torch without the function
    (`torch_gate.initial_buckets`) gets torch's own start: the caller then warms up, and the
    warm-up's rebuild makes the buckets steady whatever they started as."""
    if ready is None or os.environ.get(LAST_BUCKET_SWITCH):
        return build(), False
    answered = []

    def answer(real, parameters, *args, **kwargs):
        if answered or not same_parameters(list(parameters), ready):
            answered.append(False)
            return real(parameters, *args, **kwargs)
        answered.append(True)
        indices, limits = steady_assignment(list(parameters), ready, bucket_cap_mb, real)
        return indices[::-1], limits[::-1]   # DDP reverses its initial buckets

    with torch_gate.initial_buckets(answer) as replaced:
        ddp = build()
    return ddp, replaced and answered == [True]


def warmup_step(ctx, cfg: RunConfig, ddp, opt, log, step: int, workload, kept: Kept | None = None) -> None:
    """A light warm-up: the synced forward/backward DDP records the gradient-ready order from,
    then DDP's bucket rebuild from that order, and nothing else a figure would see:
    WARMUP_SAMPLES samples per rank of a built-in model (its ready order is fixed by its
    graph), no all-reduce (the hook `log` hands each bucket back as it is), the gradients
    dropped. The rebuild DDP would do at the next forward is done now, so the drawn step is a
    steady-state step; where torch offers no way to ask for it, a second such pass's forward
    rebuilds. A kept workload (`kept`) keeps the ready order the rebuild learned."""
    _light_pass(ctx, cfg, ddp, opt, log, step, workload)
    if not torch_gate.rebuild_buckets_now(ddp):
        _light_pass(ctx, cfg, ddp, opt, log, step, workload)   # its forward rebuilds, as DDP's own does
    if kept is not None and torch_gate.has_rebuilt_buckets(ddp):
        kept.ready = torch_gate.ready_order(ddp)


def _light_pass(ctx, cfg: RunConfig, ddp, opt, log, step: int, workload) -> None:
    """One forward/backward of a few samples whose buckets are handed back unreduced."""
    from dpviz.core.config import WARMUP_SAMPLES
    from dpviz.engine.workloads import BUILTIN, compute_loss, rank_batch

    log.reduce, log.micro_step = False, 0
    try:
        x, y = rank_batch(cfg, workload, step, 0, ctx.rank)
        if cfg.model in BUILTIN:
            x, y = x[:WARMUP_SAMPLES], y[:WARMUP_SAMPLES]
        compute_loss(workload, ddp(x.to(ctx.device)), y.to(ctx.device)).backward()
    finally:
        log.reduce = True
    opt.zero_grad(set_to_none=True)

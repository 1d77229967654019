"""Anatomy of one training step, layer by layer: forward, backward = B + W, cached activations.

The backward of a Linear layer does two independent matrix products (seed 000 §2.1):
  B (input gradient, the chain rule):  dL/dx = dL/dy · W       (batch, out) @ (out, in)
  W (weight gradient):                 dL/dW = (dL/dy)ᵀ · x    (out, batch) @ (batch, in)
plus the bias gradient (a sum over the batch, W-side) and the ReLU's mask (B-side). Only B
is on the critical path to the previous layer; W can run later — the freedom ZeroBubble
pipeline scheduling uses (seed 000 §4.5).

Everything here is *measured* on one rank: the profiler (`record_shapes=True`) shows each
layer's `AddmmBackward0` with its two `aten::mm` children, told apart by their shapes (W is the
product that contracts over the batch). Times are medians over `repeats` steps.

Activation bytes come from the same profile (`profile_memory=True`): the trace's `[memory]`
instant events (`Addr`, `Bytes` > 0 allocates, < 0 frees) are replayed inside each block's
forward window; what the block allocated and had not freed when its forward ended is what it
keeps (`kept_bytes`). Saved-tensor hooks cross-check it: they list the exact tensors autograd
saves during the block's forward (`saved_bytes`), and matching their storage pointers against the
profiler's `Addr`s splits the two figures' difference exactly:

    kept_bytes == saved_bytes - saved_elsewhere_bytes + kept_unsaved_bytes

- saved_elsewhere_bytes: saved by the block but allocated outside its forward: its input (the
  previous block's ReLU output, or the data, which exists before the profiler starts);
- kept_unsaved_bytes: alive at the block's end but not saved by it: the head's output, which the
  loss saves. A hidden block's Linear output is freed inside the block (the ReLU saves its own
  output), so it counts in neither figure.

The record and the pure trace helpers (no torch) are `dpviz.anatomy_records`.
"""
from __future__ import annotations

import json
import statistics

from .anatomy_records import (LayerAnatomy, StepAnatomy, classify_mm, kept_allocations, linear_flops,
                              memory_events, reconcile)
from .config import RunConfig, validate
from .launch import Cluster, RankContext, using_cluster

FACADE = ("measure_anatomy",)  # what `dpviz.<name>` offers from here

BLOCK_PREFIX = "dpviz_block"


# --- rank side -----------------------------------------------------------------------------------

def _blocks(model):
    """Group the MLP's modules into blocks: (Linear, ReLU) pairs and the final Linear."""
    mods = list(model)
    return [mods[i:i + 2] for i in range(0, len(mods), 2)]


def _forward(blocks, x, params: set[int], saved: list[list]):
    """Run block by block under profiler labels; note what autograd saves per block."""
    import torch
    from torch.profiler import record_function

    h = x
    for i, block in enumerate(blocks):
        keep = saved[i]

        def pack(t, keep=keep):
            if t.untyped_storage().data_ptr() not in params:   # weights are not activations
                keep.append((t.untyped_storage().data_ptr(), t.numel() * t.element_size()))
            return t

        with record_function(f"{BLOCK_PREFIX}{i}"), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            for mod in block:
                h = mod(h)
    return h


def _backward_nodes(events) -> list[list]:
    """Top-level autograd node events, grouped per block, last block first.

    Backward visits AddmmBackward0 of the head, then for each block below ReluBackward0 and
    its AddmmBackward0: a ReLU node belongs with the Addmm node that follows it.
    """
    nodes = sorted((e for e in events if e.name.startswith("autograd::engine::evaluate_function: ")
                    and ("AddmmBackward0" in e.name or "ReluBackward0" in e.name)),
                   key=lambda e: e.time_range.start)
    groups, pending = [], []
    for e in nodes:
        pending.append(e)
        if "AddmmBackward0" in e.name:
            groups.append(pending)
            pending = []
    return groups


def _split(group, batch: int) -> tuple[float, float, float, int, int]:
    """(backward, B, W) in µs for one block's autograd nodes, and its B and W mm counts."""
    total = b = w = 0.0
    products = {"B": 0, "W": 0}
    for node in group:
        total += node.time_range.elapsed_us()
        if "ReluBackward0" in node.name:
            b += node.time_range.elapsed_us()
            continue
        for child in node.cpu_children:
            if child.name == "aten::sum":                       # bias gradient: Σ over batch
                w += child.time_range.elapsed_us()
            for op in child.cpu_children if child.name == "AddmmBackward0" else ():
                if op.name == "aten::mm":
                    kind = classify_mm(op.input_shapes, batch)
                    products[kind] += 1
                    b += op.time_range.elapsed_us() if kind == "B" else 0.0
                    w += op.time_range.elapsed_us() if kind == "W" else 0.0
    return total, b, w, products["B"], products["W"]


def _trace(prof) -> dict:
    """The profile as chrome-trace JSON (the only public view with `[memory]` Addr and ts)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dpviz_anatomy_") as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)


def _forward_windows(trace: dict) -> dict[int, tuple[float, float]]:
    """Block index → (start, end) µs of its `dpviz_block<i>` annotation on the trace clock."""
    return {int(e["name"][len(BLOCK_PREFIX):]): (e["ts"], e["ts"] + e["dur"])
            for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation"
            and e.get("name", "").startswith(BLOCK_PREFIX)}


def anatomy_rank(ctx: RankContext, cfg: RunConfig, repeats: int) -> dict:
    """Profile `repeats` forward+backward steps of the workload on this rank."""
    import time

    from torch.profiler import ProfilerActivity, profile

    from .workloads import build_mlp, global_batch, loss_fn

    model = build_mlp(cfg)
    blocks = _blocks(model)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    x, y = global_batch(cfg.replace(world_size=1), 0, 0)           # (batch, width)
    batch = x.shape[0]
    loss_fn(model(x), y).backward()                                # warm-up: allocator, kernels
    rows, step_ms, saved = [], [], []
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        saved = [[] for _ in blocks]
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
            t0 = time.perf_counter()
            loss_fn(_forward(blocks, x, params, saved), y).backward()
            step_ms.append((time.perf_counter() - t0) * 1e3)
        events = prof.events()
        fwd = {int(e.name[len(BLOCK_PREFIX):]): e.time_range.elapsed_us() for e in events
               if e.name.startswith(BLOCK_PREFIX)}
        groups = _backward_nodes(events)[::-1]                      # first block first
        if len(groups) != len(blocks):
            raise RuntimeError(f"found {len(groups)} Linear backward nodes for {len(blocks)} blocks")
        rows.append([(fwd[i], *_split(g, batch)) for i, g in enumerate(groups)])
    # bytes: deterministic for a given step, read from the last repeat (the hooks' repeat)
    trace = _trace(prof)
    memory, windows = memory_events(trace), _forward_windows(trace)
    if sorted(windows) != list(range(len(blocks))):
        raise RuntimeError(f"found forward annotations {sorted(windows)} for {len(blocks)} blocks")
    forward_kept = kept_allocations(memory, windows[0][0], windows[len(blocks) - 1][1])
    first_saver: dict[int, int] = {}
    for i, notes in enumerate(saved):
        for ptr, nbytes in notes:
            first_saver.setdefault(ptr, nbytes)
    layers = []
    for i, block in enumerate(blocks):
        lin = block[0]
        # backward, B and W from one repeat (the median backward): B + W ≤ backward holds exactly
        mid = sorted((r[i] for r in rows), key=lambda row: row[1])[len(rows) // 2]
        med = [statistics.median(r[i][0] for r in rows) / 1e3] + [v / 1e3 for v in mid[1:4]]
        layers.append(dict(
            index=i, name=f"{lin.in_features}→{lin.out_features}" + (" + ReLU" if len(block) > 1 else " head"),
            forward_ms=med[0], backward_ms=med[1], input_grad_ms=med[2], weight_grad_ms=med[3],
            **reconcile(kept_allocations(memory, *windows[i]), dict(saved[i])),
            input_grad_products=mid[4], weight_grad_products=mid[5],
            flops=linear_flops(batch, lin.in_features, lin.out_features)))
    return dict(batch=batch, layers=layers, forward_kept_bytes=sum(forward_kept.values()),
                activation_bytes=sum(first_saver.values()),
                step_ms=statistics.median(step_ms))


def measure_anatomy(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                    repeats: int = 5) -> StepAnatomy:
    """Profile one step of the workload layer by layer on rank 0 (a 1-rank cluster if none)."""
    cfg = validate(cfg or RunConfig(layers=4, width=512, batch_per_rank=96))
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    classify_mm(((cfg.batch_per_rank, cfg.width), (cfg.width, cfg.width)), cfg.batch_per_rank)
    with using_cluster(cluster, 1) as ranks:
        res = ranks.run_task(anatomy_rank, cfg, repeats)[0]
    return StepAnatomy(config=cfg.to_dict(), batch=res["batch"], repeats=repeats,
                       layers=tuple(LayerAnatomy(**row) for row in res["layers"]),
                       forward_kept_bytes=res["forward_kept_bytes"],
                       activation_bytes=res["activation_bytes"], step_ms=res["step_ms"])

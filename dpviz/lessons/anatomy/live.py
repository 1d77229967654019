"""Anatomy of one training step, layer by layer: forward, backward = B + W, cached activations.

Layers are the workload's own (`cfg.model`): the MLP's Linear+ReLU blocks and head; the GPT's
embeddings, then per transformer block its attention (ln1 → attn) and its MLP (ln2 → mlp), then
ln_f → head; any other model's `blocks`. Each is timed by a profiler label that module hooks
open and close around it; its backward is every autograd node whose sequence number one of
its forward ops created (the profiler records both), so residual adds and the loss stay apart.

The backward of a Linear layer does two independent matrix products (seed 000 §2.1):
  B (input gradient, the chain rule):  dL/dx = dL/dy · W       (batch, out) @ (out, in)
  W (weight gradient):                 dL/dW = (dL/dy)ᵀ · x    (out, batch) @ (batch, in)
plus the bias gradient (a sum over the batch, W-side) and the ReLU's mask (B-side). Only B
is on the critical path to the previous layer; W can run later — the freedom ZeroBubble
pipeline scheduling uses (seed 000 §4.5).

Everything here is *measured* on one rank: the profiler (`record_shapes=True`) shows each
Linear's `AddmmBackward0` (or `MmBackward0`) with its two `aten::mm` children, told apart by
their shapes (W is the product that contracts over the batch's rows: samples, or tokens for the
GPT). Nodes of parameter-free ops (ReLU, GELU, attention's softmax·V, reshapes) are input-
gradient work, B; an embedding's backward is W; LayerNorm computes its input and weight
gradients in one kernel and counts as "other". Times are medians over `repeats` steps.

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

The record and the pure trace helpers (no torch) are `dpviz.lessons.anatomy.records`.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

from dpviz.core.config import RunConfig, validate
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.anatomy.records import (
    LayerAnatomy, StepAnatomy, classify_mm, kept_allocations, linear_flops, memory_events,
    reconcile,
)

FACADE = ("measure_anatomy",)  # what `dpviz.<name>` offers from here

BLOCK_PREFIX = "dpviz_block"
NODE = "autograd::engine::evaluate_function: "
LINEAR_NODES = ("AddmmBackward0", "MmBackward0")    # a Linear: its mm children split into B and W
WEIGHT_NODES = ("EmbeddingBackward0",)              # only a weight gradient
# one kernel for both gradients (LayerNorm, BatchNorm, convolution on CPU) or the weight's
# own transpose: not split, counted as "other"
MIXED_NODES = ("NativeLayerNormBackward0", "NativeBatchNormBackward0", "ConvolutionBackward0",
               "TBackward0")


# --- which modules make a layer ---------------------------------------------------------------

@dataclass
class Layer:
    """A run of modules timed as one, from `first`'s start (to `last`'s end for the last layer)."""

    name: str
    kind: str            # "block" (MLP, CNN, any), "attention", "mlp", "embedding", "head"
    first: object
    last: object
    linears: list


def layers_of(model, workload_name: str) -> list[Layer]:
    """The layers of a workload, in forward order."""
    import torch

    linears = lambda m: [x for x in m.modules() if isinstance(x, torch.nn.Linear)]
    leaves = lambda m: [x for x in m.modules() if not list(x.children())]
    if workload_name == "mlp":
        out = [Layer(f"{b[0].in_features}→{b[0].out_features} + ReLU", "block", b[0], b[-1], [b[0]])
               for b in model.blocks]
        h = model[-1]
        return out + [Layer(f"{h.in_features}→{h.out_features} head", "head", h, h, [h])]
    if not isinstance(getattr(model, "blocks", None), torch.nn.ModuleList):
        raise ValueError("the step anatomy measures per layer: the model needs `blocks` "
                         "(an nn.ModuleList), as dpviz's built-in workloads have")
    out = []
    if all(hasattr(model, n) for n in ("tok_emb", "pos_emb")):
        out.append(Layer("tok_emb + pos_emb", "embedding", model.tok_emb, model.pos_emb, []))
    for i, block in enumerate(model.blocks):
        if all(hasattr(block, n) for n in ("ln1", "attn", "ln2", "mlp")):   # a transformer block
            out.append(Layer(f"blocks.{i}.attn", "attention", block.ln1, block.attn, linears(block.attn)))
            out.append(Layer(f"blocks.{i}.mlp", "mlp", block.ln2, block.mlp, linears(block.mlp)))
        else:
            out.append(Layer(f"blocks.{i}", "block", leaves(block)[0], leaves(block)[-1], linears(block)))
    head = getattr(model, "head", None)
    if isinstance(head, torch.nn.Module):
        first = getattr(model, "ln_f", head)
        out.append(Layer("ln_f + head" if first is not head else "head", "head", first, head, linears(head)))
    return out


def linear_rows(cfg: RunConfig) -> dict[str, tuple[int, int, int]]:
    """Each Linear's (rows, in, out) in one forward of the workload on one rank's batch.

    Rows are what a W product contracts over (samples; tokens for the GPT). Run in the
    parent before any rank starts: a batch whose rows equal a layer's width cannot be split
    into B and W by shape, and is rejected here with `classify_mm`'s message.
    """
    import torch

    from dpviz.engine.workloads import build_workload, rank_batch, validate_model_spec

    validate_model_spec(cfg.model, seed=cfg.seed)
    workload = build_workload(cfg)
    layers_of(workload.model, workload.name)          # a model without blocks fails here too
    seen: dict[str, tuple[int, int, int]] = {}

    def note(name):
        def hook(m, args):      # returns None: a pre-hook's return value would replace args
            seen.setdefault(name, (args[0].numel() // m.in_features, m.in_features, m.out_features))
        return hook

    hooks = [m.register_forward_pre_hook(note(name))
             for name, m in workload.model.named_modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        workload.model(rank_batch(cfg.replace(world_size=1), workload, 0, 0, 0)[0])
    for h in hooks:
        h.remove()
    for rows, fan_in, fan_out in seen.values():
        classify_mm(((rows, fan_out), (fan_out, fan_in)), rows)
        classify_mm(((fan_out, rows), (rows, fan_in)), rows)
    return seen


# --- rank side -----------------------------------------------------------------------------------

def _label(layers: list[Layer], saved: list[list], params: set[int]):
    """Module hooks: a profiler label and a saved-tensor list per layer; returns the handles
    and the pack hook (autograd's saves go to the layer that is running).

    A layer's label runs from its first module's start to the next layer's start (the last
    layer's: to its last module's end), so what happens between modules belongs to the layer
    before: a Linear output freed once the ReLU has run, a transformer's residual add.
    """
    from torch.profiler import record_function

    current: list = [None, None]            # (layer index, its open label)
    handles = []

    def close() -> None:
        if current[1] is not None:
            current[1].__exit__(None, None, None)
        current[:] = [None, None]

    def enter(i: int):
        def hook(module, args) -> None:
            close()
            current[:] = [i, record_function(f"{BLOCK_PREFIX}{i}").__enter__()]
        return hook

    for i, layer in enumerate(layers):
        handles.append(layer.first.register_forward_pre_hook(enter(i)))
    handles.append(layers[-1].last.register_forward_hook(lambda module, args, output: close()))

    def pack(t):
        storage = t.untyped_storage()
        if current[0] is not None and storage.data_ptr() not in params:   # weights are not activations
            saved[current[0]].append((storage.data_ptr(), storage.nbytes()))
        return t

    return handles, pack


def _descendants(event):
    for child in event.cpu_children:
        yield child
        yield from _descendants(child)


def _by_layer(events, n: int) -> tuple[dict[int, float], list[list], float]:
    """(layer → forward µs, per layer its autograd node events, µs of nodes outside layers)."""
    forward, owner = {}, {}
    for e in events:
        if e.name.startswith(BLOCK_PREFIX):
            i = int(e.name[len(BLOCK_PREFIX):])
            forward[i] = e.time_range.elapsed_us()
            for op in _descendants(e):
                if op.sequence_nr >= 0:
                    owner[op.sequence_nr] = i
    nodes: list[list] = [[] for _ in range(n)]
    outside = 0.0
    for e in events:
        if e.name.startswith(NODE) and e.sequence_nr >= 0:
            if e.sequence_nr in owner:
                nodes[owner[e.sequence_nr]].append(e)
            else:
                outside += e.time_range.elapsed_us()
    return forward, nodes, outside


def _split(nodes, rows: int) -> tuple[float, float, float, int, int]:
    """(backward, B, W) in µs for one layer's autograd nodes, and its B and W mm counts."""
    total = b = w = 0.0
    products = {"B": 0, "W": 0}
    for node in nodes:
        kind, dur = node.name[len(NODE):], node.time_range.elapsed_us()
        total += dur
        if kind in WEIGHT_NODES:
            w += dur
        elif kind in LINEAR_NODES:
            for child in node.cpu_children:
                if child.name == "aten::sum":                   # bias gradient: Σ over the rows
                    w += child.time_range.elapsed_us()
                for op in child.cpu_children if child.name == kind else ():
                    if op.name == "aten::mm":
                        which = classify_mm(op.input_shapes, rows)
                        products[which] += 1
                        b += op.time_range.elapsed_us() if which == "B" else 0.0
                        w += op.time_range.elapsed_us() if which == "W" else 0.0
        elif kind not in MIXED_NODES:
            b += dur                                            # parameter-free: input gradient only
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
    """Layer index → (start, end) µs of its `dpviz_block<i>` annotation on the trace clock."""
    return {int(e["name"][len(BLOCK_PREFIX):]): (e["ts"], e["ts"] + e["dur"])
            for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation"
            and e.get("name", "").startswith(BLOCK_PREFIX)}


def anatomy_rank(ctx: RankContext, cfg: RunConfig, repeats: int, paths: list[str] = ()) -> dict:
    """Profile `repeats` forward+backward steps of the workload on this rank (`paths`: the
    caller's import path, so a user's model imports here as it did there)."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    from dpviz.engine.workloads import (
        build_workload, compute_loss, describe_workload, rank_batch, use_import_path,
    )

    use_import_path(list(paths))
    workload = build_workload(cfg)
    model = workload.model
    layers = layers_of(model, workload.name)
    params = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    x, y = rank_batch(cfg.replace(world_size=1), workload, 0, 0, 0)
    seen: dict[int, int] = {}                                   # Linear → rows, from the warm-up

    def probe(m, args) -> None:
        seen.setdefault(id(m), args[0].numel() // m.in_features)

    probes = [lin.register_forward_pre_hook(probe) for layer in layers for lin in layer.linears]
    compute_loss(workload, model(x), y).backward()             # warm-up: allocator, kernels
    for h in probes:
        h.remove()
    layer_rows = [seen[id(layer.linears[0])] if layer.linears else len(x) for layer in layers]
    samples, step_ms, saved, outside = [], [], [], []
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        saved = [[] for _ in layers]
        handles, pack = _label(layers, saved, params)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
            t0 = time.perf_counter()
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = compute_loss(workload, model(x), y)
            loss.backward()
            step_ms.append((time.perf_counter() - t0) * 1e3)
        for h in handles:
            h.remove()
        forward, nodes, out_us = _by_layer(prof.events(), len(layers))
        if sorted(forward) != list(range(len(layers))) or not all(nodes):
            raise RuntimeError(f"found forward labels {sorted(forward)} and backward nodes for "
                               f"{sum(map(bool, nodes))} of {len(layers)} layers")
        samples.append([(forward[i], *_split(nodes[i], layer_rows[i])) for i in range(len(layers))])
        outside.append(out_us / 1e3)
    # bytes: deterministic for a given step, read from the last repeat (the hooks' repeat)
    trace = _trace(prof)
    memory, windows = memory_events(trace), _forward_windows(trace)
    if sorted(windows) != list(range(len(layers))):
        raise RuntimeError(f"found forward annotations {sorted(windows)} for {len(layers)} layers")
    forward_kept = kept_allocations(memory, windows[0][0], windows[len(layers) - 1][1])
    first_saver: dict[int, int] = {}
    for notes in saved:
        for ptr, nbytes in notes:
            first_saver.setdefault(ptr, nbytes)
    out = []
    for i, layer in enumerate(layers):
        # backward, B and W from one repeat (the median backward): B + W ≤ backward holds exactly
        mid = sorted((r[i] for r in samples), key=lambda row: row[1])[len(samples) // 2]
        med = [statistics.median(r[i][0] for r in samples) / 1e3] + [v / 1e3 for v in mid[1:4]]
        out.append(dict(
            index=i, name=layer.name, kind=layer.kind,
            forward_ms=med[0], backward_ms=med[1], input_grad_ms=med[2], weight_grad_ms=med[3],
            **reconcile(kept_allocations(memory, *windows[i]), dict(saved[i])),
            input_grad_products=mid[4], weight_grad_products=mid[5],
            flops=sum(linear_flops(layer_rows[i], m.in_features, m.out_features) for m in layer.linears)))
    return dict(batch=len(x), layers=out, forward_kept_bytes=sum(forward_kept.values()),
                activation_bytes=sum(first_saver.values()), step_ms=statistics.median(step_ms),
                outside_backward_ms=statistics.median(outside),
                workload=describe_workload(model, workload.name))


# The step measured when no config is given: the MLP, 96 rows ≠ any layer width. For the GPT
# pick a batch whose token rows (samples × 16) differ from d, 3d, 4d and the vocabulary:
# RunConfig(model="gpt", width=64, batch_per_rank=24) has 384 (notebook 06).
DEMO_CONFIG = RunConfig(layers=4, width=512, batch_per_rank=96)


def measure_anatomy(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                    repeats: int = 5) -> StepAnatomy:
    """Profile one step of the workload layer by layer on rank 0 (a 1-rank cluster if none)."""
    cfg = validate(cfg or DEMO_CONFIG)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    linear_rows(cfg)                     # a batch that cannot tell B from W fails here, early
    from dpviz.engine.workloads import import_path

    with using_cluster(cluster, 1) as ranks:
        res = ranks.run_task(anatomy_rank, cfg, repeats, import_path())[0]
    return StepAnatomy(config=cfg.to_dict(), batch=res["batch"], repeats=repeats,
                       layers=tuple(LayerAnatomy(**row) for row in res["layers"]),
                       forward_kept_bytes=res["forward_kept_bytes"],
                       activation_bytes=res["activation_bytes"], step_ms=res["step_ms"],
                       outside_backward_ms=res["outside_backward_ms"], workload=res["workload"])

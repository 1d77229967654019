"""Activation checkpointing: measured memory through forward and backward, and the √n model.

Forward keeps every block's activations for backward (seed 000 §2.1). Checkpointing every
k blocks keeps only each segment's input and re-runs the segment's forward inside backward
(§4.4): memory falls from n blocks to about n/k inputs + one segment, for one extra forward.

Three views of one live step, all on the profiler's clock:
1. the allocator, from profiler `[memory]` events (everything the step allocates);
2. a ledger of saved-tensor hooks (exactly the bytes autograd holds for backward);
3. the recomputed forwards, found in the trace as forward ops nested inside backward.
Beside them, a model (Chen et al. 2016) predicts each k's peak from per-block bytes.
"""
from __future__ import annotations

import math
import os
import shutil
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .config import RunConfig, validate, writable_dir
from .record import record_kind, save

FORWARD_MARK = "dpviz:forward"
BACKWARD_MARK = "dpviz:backward"
BACKWARD_NODE = "autograd::engine::evaluate_function: "


# --- the record ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CurvePoint:
    t_ms: float   # since the forward started (profiler clock)
    bytes: int


@dataclass(frozen=True)
class BlockBytes:
    """What one Linear+ReLU block hands autograd when nothing is checkpointed."""

    input_bytes: int   # the tensor entering the block (a segment boundary if checkpointed)
    saved_bytes: int   # tensors it saves besides its input (here: the ReLU output)


@dataclass(frozen=True)
class Prediction:
    checkpoint_every: int
    held_after_forward_bytes: int  # what autograd keeps between forward and backward
    peak_bytes: int                # the highest point of the whole step
    recomputed_blocks: int         # extra block forwards run inside backward


@dataclass(frozen=True)
class MemoryRow:
    """One measured step with a checkpoint every `checkpoint_every` blocks (0 = none)."""

    checkpoint_every: int
    peak_activation_bytes: int       # max of `curve` (allocator, baseline-corrected)
    held_after_forward_bytes: int    # saved-tensor ledger at the end of forward
    step_ms: float                   # forward + backward
    forward_ms: float
    backward_ms: float
    recompute_ms: float              # sum of `recompute_spans`
    recompute_spans: tuple[tuple[float, float], ...]  # (start, end) ms, inside backward
    curve: tuple[CurvePoint, ...]        # allocator bytes over the step
    saved_curve: tuple[CurvePoint, ...]  # ledger bytes over the step
    prediction: Prediction


@record_kind("memory")
@dataclass(frozen=True)
class MemoryRecord:
    layers: int
    width: int
    batch: int
    seed: int
    blocks: tuple[BlockBytes, ...]   # measured with no checkpointing
    head_input_bytes: int
    tail_bytes: int                  # saved by the head and the loss besides the head's input
    rows: tuple[MemoryRow, ...]
    model: tuple[Prediction, ...]    # every k from 0 to layers
    notes: tuple[str, ...] = ()

    def row(self, checkpoint_every: int) -> MemoryRow:
        for r in self.rows:
            if r.checkpoint_every == checkpoint_every:
                return r
        raise ValueError(f"no row for checkpoint_every={checkpoint_every}; measured: "
                         f"{[r.checkpoint_every for r in self.rows]}")

    @property
    def best_ks(self) -> tuple[int, ...]:
        """The k (often two, tied) with the lowest predicted peak (Chen et al.: near √n)."""
        chosen = [p for p in self.model if p.checkpoint_every]
        low = min(p.peak_bytes for p in chosen)
        return tuple(p.checkpoint_every for p in chosen if p.peak_bytes == low)


# --- the model ------------------------------------------------------------------------------

def segments(layers: int, k: int) -> list[range]:
    """Block indices of each checkpointed segment (the last one may be shorter)."""
    return [range(s, min(s + k, layers)) for s in range(0, layers, k)] if k else [range(layers)]


def predict(blocks: Sequence[BlockBytes], head_input_bytes: int, tail_bytes: int, k: int) -> Prediction:
    """Peak bytes of one step from per-block bytes, assuming each block saves its output.

    Forward with k: autograd keeps each segment's input, the head's input and the loss's
    tensors. Backward through segment j (last to first) holds the inputs of segments 0..j,
    that segment's recomputed activations, and the gradient in flight (≈ two block
    outputs: the incoming and the outgoing gradient). With k = 0 every block's
    activations stay from forward until its own backward.
    """
    n = len(blocks)
    grads = 2 * max([head_input_bytes] + [b.saved_bytes for b in blocks])
    if k == 0:
        held = blocks[0].input_bytes + sum(b.saved_bytes for b in blocks) + tail_bytes
        return Prediction(0, held, held + grads, 0)
    segs = segments(n, k)
    inputs = [blocks[s.start].input_bytes for s in segs]
    held = sum(inputs) + head_input_bytes + tail_bytes
    peak = max(sum(inputs[:j + 1]) + sum(blocks[i].saved_bytes for i in s) + grads
               for j, s in enumerate(segs))
    return Prediction(k, held, max(peak, held), n)


def model_sweep(blocks: Sequence[BlockBytes], head_input_bytes: int, tail_bytes: int) -> list[Prediction]:
    return [predict(blocks, head_input_bytes, tail_bytes, k) for k in range(len(blocks) + 1)]


# --- the trace: memory curve and recomputed forwards (pure, no torch) ----------------------

def _window(events: list[dict], name: str) -> dict:
    found = [e for e in events if e.get("ph") == "X" and e.get("name") == name]
    if not found:
        raise ValueError(f"trace has no {name!r} annotation: it was not recorded by dpviz.checkpointing")
    return found[0]


def memory_curve(trace: dict, t0_us: float, t1_us: float) -> list[CurvePoint]:
    """Allocator bytes over [t0, t1] from `[memory]` events, relative to before the profile.

    `Total Allocated` counts from the profiler's start; the first event tells the offset
    (its total minus its own bytes), which we subtract.
    """
    mem = sorted((e for e in trace["traceEvents"] if e.get("name") == "[memory]"
                  and e.get("args", {}).get("Device Type", 0) == 0), key=lambda e: e["ts"])
    if not mem:
        raise ValueError("trace has no [memory] events: profile with profile_memory=True")
    base = mem[0]["args"]["Total Allocated"] - mem[0]["args"]["Bytes"]
    before = [e for e in mem if e["ts"] < t0_us]
    points = [CurvePoint(0.0, int(before[-1]["args"]["Total Allocated"] - base) if before else 0)]
    points += [CurvePoint((e["ts"] - t0_us) / 1e3, int(e["args"]["Total Allocated"] - base))
               for e in mem if t0_us <= e["ts"] <= t1_us]
    return points


def _parents(events: list[dict]) -> list[int | None]:
    """Index of each event's enclosing event on the same thread (events sorted by start)."""
    parents: list[int | None] = []
    stacks: dict = {}
    for i, e in enumerate(events):
        stack = stacks.setdefault(e.get("tid"), [])
        while stack and e["ts"] >= events[stack[-1]]["ts"] + events[stack[-1]]["dur"]:
            stack.pop()
        parents.append(stack[-1] if stack else None)
        stack.append(i)
    return parents


def recompute_spans(trace: dict, forward_mark: str = FORWARD_MARK) -> list[tuple[float, float]]:
    """(start, end) µs of each recomputed forward: forward ops nested inside a backward node.

    The ops the forward ran at top level (aten::linear, aten::relu, …) never appear inside
    a backward node in plain backward, which uses their derivatives (aten::mm,
    aten::threshold_backward). Under non-reentrant checkpointing they re-run when backward
    first unpacks a segment's saved tensor: `evaluate_function: ReluBackward0 → ReluBackward0
    → aten::linear …`. One span per backward node that triggered a recompute. `forward_mark`
    names the event whose direct children are the forward ops (DDP's own forward in a run).
    """
    events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e),
                    key=lambda e: (e["ts"], -e["dur"]))
    parents = _parents(events)
    fwd = events.index(_window(events, forward_mark))
    forward_ops = {e["name"] for e, p in zip(events, parents) if p == fwd}
    by_node: dict[int, list[dict]] = {}
    for i, e in enumerate(events):
        if e["name"] not in forward_ops:
            continue
        node, p = None, parents[i]
        while p is not None:
            if events[p]["name"] in forward_ops:
                break           # nested in another recomputed op: counted with its parent
            if events[p]["name"].startswith(BACKWARD_NODE):
                node = p
                break
            p = parents[p]
        if node is not None:
            by_node.setdefault(node, []).append(e)
    return [(min(e["ts"] for e in ops), max(e["ts"] + e["dur"] for e in ops))
            for _, ops in sorted(by_node.items())]


# --- rank side: one profiled step with a saved-tensor ledger --------------------------------

class _Held:
    """What the ledger hands autograd instead of a tensor; its death means "released"."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class SavedTensorLedger:
    """Saved-tensor hooks that count the distinct bytes autograd holds for backward.

    Tensors sharing storage count once (a ReLU output saved by the ReLU and by the next
    Linear); parameters are not activations and are skipped. Hooks see what autograd saves
    during forward, including checkpoint's segment inputs; the tensors a checkpointed segment
    saves internally go to checkpoint's own inner hooks and are not counted (that is the
    point: they are not held between forward and backward).
    """

    def __init__(self, param_storages: set[int]):
        self.param_storages = param_storages
        self.refs: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.held = 0
        self.points: list[tuple[int, int]] = []   # (perf_counter ns, bytes held)
        # attribution to blocks (set by module pre-hooks): key → new bytes saved
        self.where: object = None
        self.input_storage: int | None = None
        self.new_bytes: dict[object, int] = {}

    def pack(self, tensor):
        ptr = tensor.untyped_storage().data_ptr()
        if ptr in self.param_storages:
            return tensor
        if ptr not in self.refs:
            self.refs[ptr], self.sizes[ptr] = 0, tensor.untyped_storage().nbytes()
            self._change(self.sizes[ptr])
            if ptr != self.input_storage:
                self.new_bytes[self.where] = self.new_bytes.get(self.where, 0) + self.sizes[ptr]
        self.refs[ptr] += 1
        holder = _Held(tensor)
        weakref.finalize(holder, self._release, ptr)
        return holder

    @staticmethod
    def unpack(holder):
        return holder.tensor if isinstance(holder, _Held) else holder

    def _release(self, ptr: int) -> None:
        self.refs[ptr] -= 1
        if self.refs[ptr] == 0:
            del self.refs[ptr]
            self._change(-self.sizes.pop(ptr))

    def _change(self, delta: int) -> None:
        self.held += delta
        self.points.append((time.perf_counter_ns(), self.held))

    def entering(self, where: object, inputs) -> None:
        """Module pre-hook body: saves from now on belong to `where`."""
        self.where = where
        self.input_storage = inputs[0].untyped_storage().data_ptr()


def _step(cfg: RunConfig, trace_path: str) -> dict:
    """Warm up, then profile one forward+backward; return the ledger and block sizes."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from .workloads import build_mlp, global_batch, loss_fn

    model = build_mlp(cfg)
    x_src, y_src = global_batch(cfg, 0, 0)               # (batch, width), (batch, 1)
    loss_fn(model(x_src), y_src).backward()               # warm-up; allocates .grad
    for p in model.parameters():
        p.grad.zero_()                                    # so backward accumulates in place
    ledger = SavedTensorLedger({p.untyped_storage().data_ptr() for p in model.parameters()})
    mods = list(model)
    inputs: dict[object, int] = {}

    def pre_hook(where):
        def hook(module, args):
            inputs.setdefault(where, args[0].numel() * args[0].element_size())
            ledger.entering(where, args)
        return hook

    handles = [m.register_forward_pre_hook(pre_hook(i // 2)) for i, m in enumerate(mods[:-1]) if i % 2 == 0]
    handles.append(mods[-1].register_forward_pre_hook(pre_hook("head")))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        x, y = x_src.clone(), y_src.clone()               # inside: the allocator sees the batch
        t_forward = time.perf_counter_ns()
        with record_function(FORWARD_MARK), torch.autograd.graph.saved_tensors_hooks(
                ledger.pack, ledger.unpack):
            loss = loss_fn(model(x), y)
        held_after_forward = ledger.held
        with record_function(BACKWARD_MARK):
            loss.backward()
        del x, y, loss
    for h in handles:
        h.remove()
    prof.export_chrome_trace(trace_path)
    n = cfg.layers
    return dict(checkpoint_every=cfg.checkpoint_every, trace_path=trace_path,
                held_after_forward=held_after_forward,
                saved_points=[((t - t_forward) / 1e6, b) for t, b in ledger.points],
                blocks=[(inputs[i], ledger.new_bytes.get(i, 0)) for i in range(n)],
                head_input_bytes=inputs["head"], tail_bytes=ledger.new_bytes.get("head", 0))


def measure_rank(ctx, cfg: RunConfig, ks: list[int]) -> list[dict] | None:
    """Cluster task: rank 0 measures every k in turn; other ranks wait (no contention)."""
    if ctx.rank != 0:
        return None
    return [_step(cfg.replace(checkpoint_every=k), str(Path(ctx.workdir) / f"memory-k{k}.json"))
            for k in ks]


# --- parent side -----------------------------------------------------------------------------

def _row(result: dict, trace: dict, prediction: Prediction) -> MemoryRow:
    events = trace["traceEvents"]
    fwd, bwd = _window(events, FORWARD_MARK), _window(events, BACKWARD_MARK)
    t0, t1 = fwd["ts"], bwd["ts"] + bwd["dur"]
    curve = memory_curve(trace, t0, t1)
    spans = tuple(((a - t0) / 1e3, (b - t0) / 1e3) for a, b in recompute_spans(trace))
    return MemoryRow(
        checkpoint_every=result["checkpoint_every"],
        peak_activation_bytes=max(p.bytes for p in curve),
        held_after_forward_bytes=result["held_after_forward"],
        step_ms=(t1 - t0) / 1e3, forward_ms=fwd["dur"] / 1e3, backward_ms=bwd["dur"] / 1e3,
        recompute_ms=sum(b - a for a, b in spans), recompute_spans=spans,
        curve=tuple(curve),
        saved_curve=tuple(CurvePoint(t, b) for t, b in [(0.0, 0)] + result["saved_points"]),
        prediction=prediction)


def measure(layers: int = 16, width: int = 256, batch: int = 1024,
            checkpoint_every: Sequence[int] = (0, 2, 4, 8), seed: int = 0, cluster=None,
            out: str | os.PathLike | None = None) -> MemoryRecord:
    """Measure one step per k on a live rank and put the model beside it.

    k = 0 (no checkpointing) is always measured: its ledger gives the per-block bytes the
    model needs. Runs on rank 0 of `cluster` (any size; a 1-rank cluster is started if
    None): a fresh process with one intra-op thread, whose allocator the notebook's own
    tensors cannot disturb. `out` also gets memory.json and one trace per k.
    """
    cfg = validate(RunConfig(world_size=1, layers=layers, width=width, batch_per_rank=batch,
                             seed=seed, profile=True))
    ks = sorted({0, *checkpoint_every})
    for k in ks:
        cfg.replace(checkpoint_every=k)                 # 0 ≤ k ≤ layers, with a clear message
    out_dir = writable_dir(out) if out is not None else None
    if cluster is None:
        from .launch import Cluster

        with Cluster(1) as fresh:
            return measure(layers, width, batch, ks, seed, fresh, out_dir)
    results = cluster.run_task(measure_rank, cfg, ks)[0]
    return assemble(cfg, results, out_dir)


def assemble(cfg: RunConfig, results: list[dict], out_dir: Path | None = None) -> MemoryRecord:
    """Per-k results and their traces → one record (and files, with `out_dir`)."""
    from .trace import read_trace

    base = next(r for r in results if r["checkpoint_every"] == 0)
    blocks = tuple(BlockBytes(i, s) for i, s in base["blocks"])
    model = model_sweep(blocks, base["head_input_bytes"], base["tail_bytes"])
    rows = []
    for res in results:
        trace = read_trace(res["trace_path"])
        rows.append(_row(res, trace, model[res["checkpoint_every"]]))
        if out_dir is not None:
            shutil.move(res["trace_path"], out_dir / f"trace-k{res['checkpoint_every']}.json")
        else:
            Path(res["trace_path"]).unlink(missing_ok=True)
    record = MemoryRecord(
        layers=cfg.layers, width=cfg.width, batch=cfg.batch_per_rank, seed=cfg.seed,
        blocks=blocks, head_input_bytes=base["head_input_bytes"], tail_bytes=base["tail_bytes"],
        rows=tuple(rows), model=tuple(model),
        notes=("bytes are relative to before the step (inputs included); one intra-op thread",))
    if out_dir is not None:
        save(record, out_dir / "memory.json")
    return record


def describe(record: MemoryRecord) -> str:
    """A table for the CLI and notebooks: measured vs predicted peak, time, recompute."""
    mb = lambda b: b / 2 ** 20
    lines = [f"{record.layers} blocks of Linear({record.width})+ReLU, batch {record.batch}; "
             f"model optimum k = {', '.join(map(str, record.best_ks))} (√n = {math.sqrt(record.layers):.1f})",
             "   k  peak MB  predicted MB  held-after-fwd MB  step ms  recompute ms"]
    for r in record.rows:
        lines.append(f"{r.checkpoint_every:4d} {mb(r.peak_activation_bytes):8.1f} "
                     f"{mb(r.prediction.peak_bytes):13.1f} {mb(r.held_after_forward_bytes):18.1f} "
                     f"{r.step_ms:8.1f} {r.recompute_ms:13.1f}")
    return "\n".join(lines)

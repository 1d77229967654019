"""Activation checkpointing: measured memory through forward and backward, and the √n model.

Forward keeps every block's activations for backward (seed 000 §2.1). Checkpointing every
k blocks keeps only each segment's input and re-runs the segment's forward inside backward
(§4.4): memory falls from n blocks to about n/k inputs + one segment, for one extra forward.

Three views of one live step, all on the profiler's clock:
1. the allocator, from profiler `[memory]` events (everything the step allocates);
2. a ledger of saved-tensor hooks (exactly the bytes autograd holds for backward);
3. the recomputed forwards, found in the trace as forward ops nested inside backward.
Beside them, a model (Chen et al. 2016) predicts each k's peak from per-block bytes. The
record, the model and the trace analysis (no torch) are `dpviz.lessons.checkpointing.records`.
"""
from __future__ import annotations

import os
import shutil
import time
import weakref
from pathlib import Path
from typing import Sequence

from dpviz.analysis.recompute import FORWARD_MARK, mark_window, recompute_spans
from dpviz.core.config import RunConfig, validate, writable_dir
from dpviz.core.record import save
from dpviz.lessons.checkpointing.records import (
    BACKWARD_MARK, BlockBytes, CheckpointingRecord, CurvePoint, MemoryRow, Prediction, memory_curve,
    model_sweep,
)

FACADE = ("measure_checkpointing",)  # what `dpviz.<name>` offers from here

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
        self.where: object = "stem"
        self.input_storage: int | None = None
        self.new_bytes: dict[object, int] = {}
        self.saved_input: set = set()   # the keys that were first to save their own input
        self.largest: dict[object, int] = {}   # key → its largest single saved storage

    def pack(self, tensor):
        ptr = tensor.untyped_storage().data_ptr()
        if ptr in self.param_storages:
            return tensor
        if ptr not in self.refs:
            self.refs[ptr], self.sizes[ptr] = 0, tensor.untyped_storage().nbytes()
            self._change(self.sizes[ptr])
            self.largest[self.where] = max(self.largest.get(self.where, 0), self.sizes[ptr])
            if ptr != self.input_storage:
                self.new_bytes[self.where] = self.new_bytes.get(self.where, 0) + self.sizes[ptr]
            else:
                self.saved_input.add(self.where)
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


def first_leaf(module):
    """The first module a block runs (its pre-hook fires as the block starts). Hooks go on
    leaves: the MLP rebuilds its block containers on every call."""
    return next(m for m in module.modules() if not list(m.children()))


def after_blocks(model):
    """The module that takes the last block's output: a final LayerNorm, else the head."""
    import torch

    for name in ("ln_f", "head"):
        if isinstance(getattr(model, name, None), torch.nn.Module):
            return getattr(model, name)
    if isinstance(model, torch.nn.Sequential):
        return model[-1]
    raise ValueError("checkpointing measures per block: the model needs `blocks` and a `head` "
                     "(or `ln_f`) after them, as dpviz's built-in workloads have")


def checkpoint_blocks(model, k: int) -> None:
    """Checkpoint a user's model in segments of k blocks (the built-ins do it themselves,
    from `cfg.checkpoint_every`): the first block of each segment runs the whole segment
    under `torch.utils.checkpoint`, the others become identities. Assumes what dpviz asks of
    a user's model: its forward calls `blocks` in order, each on the previous one's output."""
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    class Segment(nn.Module):
        def __init__(self, blocks):
            super().__init__()
            self.inner = nn.Sequential(*blocks)

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=False)

    blocks = list(model.blocks)
    model.blocks = nn.ModuleList(Segment(blocks[i:i + k]) if i % k == 0 else nn.Identity()
                                 for i in range(len(blocks)))


def _step(cfg: RunConfig, trace_path: str) -> dict:
    """Warm up, then profile one forward+backward; return the ledger and block sizes."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from dpviz.engine.workloads import BUILTIN, build_workload, compute_loss, describe_workload

    workload = build_workload(cfg)
    model = workload.model
    info = describe_workload(model, workload.name)
    blocks = list(model.blocks)
    if cfg.checkpoint_every and cfg.model not in BUILTIN:
        checkpoint_blocks(model, cfg.checkpoint_every)
    x_src, y_src = workload.batch(0, 0, cfg.batch_per_rank)
    compute_loss(workload, model(x_src), y_src).backward()   # warm-up; allocates .grad
    for p in model.parameters():
        p.grad.zero_()                                    # so backward accumulates in place
    ledger = SavedTensorLedger({t.untyped_storage().data_ptr()
                                for t in [*model.parameters(), *model.buffers()]})
    inputs: dict[object, int] = {}

    def pre_hook(where):
        def hook(module, args):
            inputs.setdefault(where, args[0].numel() * args[0].element_size())
            ledger.entering(where, args)
        return hook

    handles = [first_leaf(b).register_forward_pre_hook(pre_hook(i)) for i, b in enumerate(blocks)]
    handles.append(after_blocks(model).register_forward_pre_hook(pre_hook("head")))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        x, y = x_src.clone(), y_src.clone()               # inside: the allocator sees the batch
        t_forward = time.perf_counter_ns()
        with record_function(FORWARD_MARK), torch.autograd.graph.saved_tensors_hooks(
                ledger.pack, ledger.unpack):
            loss = compute_loss(workload, model(x), y)
        held_after_forward = ledger.held
        with record_function(BACKWARD_MARK):
            loss.backward()
        del x, y, loss
    for h in handles:
        h.remove()
    prof.export_chrome_trace(trace_path)
    n = len(blocks)
    return dict(checkpoint_every=cfg.checkpoint_every, trace_path=trace_path,
                held_after_forward=held_after_forward,
                saved_points=[((t - t_forward) / 1e6, b) for t, b in ledger.points],
                blocks=[(inputs[i], ledger.new_bytes.get(i, 0), i in ledger.saved_input)
                        for i in range(n)],
                head_input_bytes=inputs["head"], tail_bytes=ledger.new_bytes.get("head", 0),
                tail_largest_bytes=ledger.largest.get("head", 0),
                stem_bytes=ledger.new_bytes.get("stem", 0),
                head_saves_input="head" in ledger.saved_input,
                workload=info)


def measure_rank(ctx, cfg: RunConfig, ks: list[int], paths: list[str] = ()) -> list[dict] | None:
    """Cluster task: rank 0 measures every k in turn; other ranks wait (no contention).
    `paths`: the caller's import path, so a user's model imports here as it did there."""
    from dpviz.engine.workloads import use_import_path

    if ctx.rank != 0:
        return None
    use_import_path(list(paths))
    return [_step(cfg.replace(checkpoint_every=k), str(Path(ctx.workdir) / f"memory-k{k}.json"))
            for k in ks]


# --- parent side -----------------------------------------------------------------------------

def _row(result: dict, trace: dict, prediction: Prediction) -> MemoryRow:
    events = trace["traceEvents"]
    fwd, bwd = mark_window(events, FORWARD_MARK), mark_window(events, BACKWARD_MARK)
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


# One step of 16 blocks of width 256 on 1024 samples: big enough that activations dominate the
# allocator curve, small enough to measure four k values in seconds on one CPU rank.
DEMO_CONFIG = RunConfig(world_size=1, layers=16, width=256, batch_per_rank=1024, profile=True)


def measure_checkpointing(cfg: RunConfig | None = None, *, cluster=None,
                          checkpoint_every: Sequence[int] = (0, 2, 4, 8),
                          out: str | os.PathLike | None = None) -> CheckpointingRecord:
    """Measure one step per k on a live rank and put the model beside it.

    The step is `cfg`'s workload on one process: `cfg.model` ("mlp", "gpt", "cnn" or a
    user's "module:function" whose model has `blocks` and a head) sized by layers, width and
    batch_per_rank; a segment is k of its `blocks` (transformer blocks for the GPT).
    `DEMO_CONFIG.replace(model="gpt")` is the GPT at its own default size. k = 0 (no checkpointing) is always measured: its ledger gives the per-block bytes the
    model needs. Runs on rank 0 of `cluster` (any size; a 1-rank cluster is started if
    None): a fresh process with one intra-op thread, whose allocator the notebook's own
    tensors cannot disturb. `out` also gets checkpointing.json and one trace per k.
    """
    from dpviz.engine.launch import using_cluster

    cfg = validate((cfg or DEMO_CONFIG).replace(world_size=1, profile=True, checkpoint_every=0))
    cfg = cfg.replace(layers=user_blocks(cfg) or cfg.layers)   # a user's model: its own count
    ks = sorted({0, *checkpoint_every})
    for k in ks:
        cfg.replace(checkpoint_every=k)                 # 0 ≤ k ≤ layers, with a clear message
    out_dir = writable_dir(out) if out is not None else None
    from dpviz.engine.workloads import import_path

    with using_cluster(cluster, 1) as ranks:
        results = ranks.run_task(measure_rank, cfg, ks, import_path())[0]
        return _assemble_record(cfg, results, out_dir)   # the traces live in the ranks' workdir


def user_blocks(cfg: RunConfig) -> int:
    """Before any rank starts: a user's model imports, runs, and has `blocks` and a head;
    returns how many blocks it has (0 for a built-in, sized by `cfg.layers`)."""
    from dpviz.engine.workloads import BUILTIN, build_workload, validate_model_spec

    if cfg.model in BUILTIN:
        return 0
    validate_model_spec(cfg.model, seed=cfg.seed)
    model = build_workload(cfg).model
    if len(getattr(model, "blocks", ())) < 1:
        raise ValueError(f"model {cfg.model!r}: checkpointing measures per block: its model needs "
                         "`blocks` (an nn.ModuleList) and a `head` after them")
    after_blocks(model)
    return len(model.blocks)


def _assemble_record(cfg: RunConfig, results: list[dict], out_dir: Path | None = None) -> CheckpointingRecord:
    """Per-k results and their traces → one record (and files, with `out_dir`)."""
    from dpviz.analysis.scan import read_trace

    base = next(r for r in results if r["checkpoint_every"] == 0)
    blocks = tuple(BlockBytes(*b) for b in base["blocks"])
    model = model_sweep(blocks, base["head_input_bytes"], base["tail_bytes"], base["stem_bytes"],
                        base["head_saves_input"], base["tail_largest_bytes"])
    rows = []
    for res in results:
        trace = read_trace(res["trace_path"])
        rows.append(_row(res, trace, model[res["checkpoint_every"]]))
        if out_dir is not None:
            shutil.move(res["trace_path"], out_dir / f"trace-k{res['checkpoint_every']}.json")
        else:
            Path(res["trace_path"]).unlink(missing_ok=True)
    record = CheckpointingRecord(
        layers=cfg.layers, width=cfg.width, batch=cfg.batch_per_rank, seed=cfg.seed,
        blocks=blocks, head_input_bytes=base["head_input_bytes"], tail_bytes=base["tail_bytes"],
        rows=tuple(rows), model=tuple(model),
        notes=("bytes are relative to before the step (inputs included); one intra-op thread",),
        stem_bytes=base["stem_bytes"], head_saves_input=base["head_saves_input"],
        tail_largest_bytes=base["tail_largest_bytes"],
        workload=base["workload"])
    if out_dir is not None:
        save(record, out_dir / "checkpointing.json")
    return record

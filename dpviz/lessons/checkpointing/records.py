"""Activation checkpointing, the data side: the record, the √n model and the trace analysis.

Forward keeps every block's activations for backward (seed 000 §2.1). Checkpointing every
k blocks keeps only each segment's input and re-runs the segment's forward inside backward
(§4.4): memory falls from n blocks to about n/k inputs + one segment, for one extra forward.
The model (Chen et al. 2016) predicts each k's peak from per-block bytes; the trace analysis
reads the allocator curve and the recomputed forwards from a profiler trace.

No torch: renderers and `load()` import this. The live step on a rank is `dpviz.lessons.checkpointing.live`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from dpviz.core.record import record_kind
from dpviz.core.workloads import WorkloadInfo

BACKWARD_MARK = "dpviz:backward"


# --- the record ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CurvePoint:
    t_ms: float   # since the forward started (profiler clock)
    bytes: int


@dataclass(frozen=True)
class BlockBytes:
    """What one block (an MLP's Linear+ReLU, a transformer block, …) hands autograd when
    nothing is checkpointed."""

    input_bytes: int   # the tensor entering the block (a segment boundary if checkpointed)
    saved_bytes: int   # tensors it saves besides its input (MLP: the ReLU output; GPT: the
    #                    LayerNorm statistics, q/k/v, attention output, the MLP's hidden, …)
    # True when the block is the first to save its input: a transformer's residual stream is
    # saved by the next block's LayerNorm, an MLP's hidden by the previous block's ReLU
    saves_input: bool = False


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


@record_kind("checkpointing", formerly=("memory",))
@dataclass(frozen=True)
class CheckpointingRecord:
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
    stem_bytes: int = 0              # saved before the first block (a GPT's token and position ids)
    head_saves_input: bool = False   # the head is the first to save the last block's output
    tail_largest_bytes: int = 0      # the largest tensor the head and loss save (a GPT's logits)
    workload: WorkloadInfo | None = None   # the model measured: name and parameter list

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


def predict(blocks: Sequence[BlockBytes], head_input_bytes: int, tail_bytes: int, k: int,
            stem_bytes: int = 0, head_saves_input: bool = False,
            tail_largest_bytes: int = 0) -> Prediction:
    """Peak bytes of one step from per-block bytes.

    Forward with k: autograd keeps what the stem saved, each segment's input, the head's input
    and the loss's tensors. Backward through segment j (last to first) holds the inputs of
    segments 0..j, that segment's recomputed activations, and the gradient in flight (≈ two
    block outputs: the incoming and the outgoing gradient). With k = 0 every block's
    activations stay from forward until its own backward — and a block's input too where the
    block is the one that saves it (`saves_input`: a transformer's residual stream).
    Backward starts at the loss with everything held and two gradients of its largest tensor
    (a GPT's (tokens, vocab) logits, which can outweigh a block): that is a floor for any k;
    by the time backward reaches the blocks those are freed and block-sized gradients flow.
    """
    n = len(blocks)
    grads = _block_grads(blocks, head_input_bytes)
    at_loss = max(grads, 2 * tail_largest_bytes)

    def own(i: int) -> int:           # what block i holds beyond the previous blocks' bytes
        return blocks[i].saved_bytes + (blocks[i].input_bytes if blocks[i].saves_input else 0)

    head = head_input_bytes if head_saves_input else 0
    if k == 0:
        held = stem_bytes + blocks[0].input_bytes + sum(own(i) for i in range(1, n)) \
            + blocks[0].saved_bytes + head + tail_bytes
        return Prediction(0, held, held + at_loss, 0)
    segs = segments(n, k)
    inputs = [blocks[s.start].input_bytes for s in segs]
    held = stem_bytes + sum(inputs) + head_input_bytes + tail_bytes
    peak = max(stem_bytes + sum(inputs[:j + 1]) + blocks[s.start].saved_bytes
               + sum(own(i) for i in s[1:]) + grads for j, s in enumerate(segs))
    return Prediction(k, held, max(peak, held + at_loss), n)


def _block_grads(blocks: Sequence[BlockBytes], head_input_bytes: int) -> int:
    """The gradient in flight between blocks: the incoming and the outgoing, block-sized."""
    return 2 * max([head_input_bytes] + [b.input_bytes for b in blocks])


def floor_sets_peak(record: CheckpointingRecord) -> tuple[int, ...]:
    """The k ≥ 1 whose modelled peak is the loss's floor: held after forward plus two
    gradients of the loss's largest tensor (a GPT's logits), where those outweigh a block's
    gradients. There the peak is no longer "n/k inputs + one segment" and k hardly moves it."""
    at_loss = 2 * record.tail_largest_bytes
    if at_loss <= _block_grads(record.blocks, record.head_input_bytes):
        return ()
    return tuple(p.checkpoint_every for p in record.model if p.checkpoint_every
                 and p.peak_bytes == p.held_after_forward_bytes + at_loss)


def model_step_ms(record: CheckpointingRecord, row: MemoryRow) -> float:
    """The time model: the k = 0 step plus one block forward per recomputed block. It counts
    compute only: it leaves out that each k's step is one timed sample on shared cores, and
    anything checkpointing changes besides compute (fewer, smaller allocations)."""
    base = record.row(0)
    return base.step_ms + base.forward_ms / record.layers * row.prediction.recomputed_blocks


def describe_cost(record: CheckpointingRecord) -> list[str]:
    """Each k's measured step against `model_step_ms`, and, where a k ran faster than no
    checkpointing although it computes more, that compute cannot be why (the cause is not
    measured here, so it is named as a hypothesis)."""
    base = record.row(0)
    rows = sorted((r for r in record.rows if r.checkpoint_every), key=lambda r: r.checkpoint_every)
    lines = []
    for r in rows:
        model = model_step_ms(record, r)
        lines.append(f"k={r.checkpoint_every}: step {r.step_ms:.1f} ms measured, model {model:.1f} ms "
                     f"(k = 0's {base.step_ms:.1f} + {r.prediction.recomputed_blocks} recomputed blocks' "
                     f"forward), measured {100 * (r.step_ms / model - 1):+.0f} % off the model")
    faster = [r.checkpoint_every for r in rows if r.step_ms < base.step_ms]
    if faster:
        lines.append(f"k = {', '.join(map(str, faster))} ran faster than no checkpointing although it "
                     "recomputes: compute cannot explain that. Each k was timed once on shared cores, so "
                     "timing noise is the first suspect, fewer and smaller allocations the second "
                     "(hypotheses: neither is measured here); the bytes above do not vary")
    return lines


def model_sweep(blocks: Sequence[BlockBytes], head_input_bytes: int, tail_bytes: int,
                stem_bytes: int = 0, head_saves_input: bool = False,
                tail_largest_bytes: int = 0) -> list[Prediction]:
    return [predict(blocks, head_input_bytes, tail_bytes, k, stem_bytes, head_saves_input,
                    tail_largest_bytes) for k in range(len(blocks) + 1)]


# --- the trace: memory curve and recomputed forwards (pure, no torch) ----------------------

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


def describe(record: CheckpointingRecord) -> str:
    """A table for the CLI and notebooks: measured vs predicted peak, time, recompute."""
    mb = lambda b: b / 2 ** 20
    name = record.workload.name if record.workload is not None else "mlp"
    what = f"Linear({record.width})+ReLU" if name == "mlp" else f"{name} (width {record.width})"
    lines = [f"{record.layers} blocks of {what}, batch {record.batch}; "
             f"model optimum k = {', '.join(map(str, record.best_ks))} (√n = {math.sqrt(record.layers):.1f})",
             "   k  peak MB  predicted MB  held-after-fwd MB  step ms  recompute ms"]
    for r in record.rows:
        lines.append(f"{r.checkpoint_every:4d} {mb(r.peak_activation_bytes):8.1f} "
                     f"{mb(r.prediction.peak_bytes):13.1f} {mb(r.held_after_forward_bytes):18.1f} "
                     f"{r.step_ms:8.1f} {r.recompute_ms:13.1f}")
    return "\n".join(lines)

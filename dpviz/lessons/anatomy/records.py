"""Anatomy of one training step, the data side: the per-block record and the pure helpers that
read a profiler trace and the saved-tensor ledger (classify a matmul, count kept allocations,
reconcile the two). No torch: renderers and `load()` import this; `dpviz.lessons.anatomy.live` measures.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpviz.core.record import record_kind
from dpviz.core.workloads import WorkloadInfo


@dataclass(frozen=True)
class LayerAnatomy:
    """One layer of the workload: an MLP block (Linear + ReLU) or its head; a GPT's
    embeddings, a block's attention (ln1 → attn) or MLP (ln2 → mlp), its ln_f + head."""

    index: int
    name: str
    forward_ms: float
    backward_ms: float        # its autograd nodes (AddmmBackward0 + ReluBackward0), end to end
    input_grad_ms: float      # B: the grad-input mm + the ReLU mask
    weight_grad_ms: float     # W: the grad-weight mm + the bias sum
    kept_bytes: int           # profiler: allocated in this block's forward, alive at its end
    saved_bytes: int          # hooks: tensors autograd saved in this block's forward (no weights)
    saved_elsewhere_bytes: int  # of saved_bytes, storage the profiler saw allocated outside it
    kept_unsaved_bytes: int   # of kept_bytes, storage this block's hooks did not save
    input_grad_products: int  # aten::mm calls classified B in one backward (0 for block 0)
    weight_grad_products: int  # aten::mm calls classified W in one backward
    flops: int                # its Linears' products: Σ 2 · rows · in · out (forward, B and W each)
    kind: str = "block"       # "block", "attention", "mlp", "embedding" or "head"

    @property
    def other_ms(self) -> float:
        """Inside the block's backward but neither mm nor mask: transposes, views, dispatch."""
        return self.backward_ms - self.input_grad_ms - self.weight_grad_ms

    @property
    def bytes_reconciled(self) -> bool:
        """Profiler and hooks agree once the input and the unsaved output are accounted for."""
        return self.kept_bytes == self.saved_bytes - self.saved_elsewhere_bytes + self.kept_unsaved_bytes


@record_kind("step_anatomy")
@dataclass(frozen=True)
class StepAnatomy:
    config: dict
    batch: int
    repeats: int
    layers: tuple[LayerAnatomy, ...]
    forward_kept_bytes: int   # profiler: allocated during the whole forward, alive at its end
    activation_bytes: int     # hooks: distinct tensors saved for backward, all blocks (shared once)
    step_ms: float            # median forward + backward wall time, profiled
    outside_backward_ms: float = 0.0   # autograd nodes of no layer: the loss, residual adds
    workload: WorkloadInfo | None = None   # the model measured: name and parameter list

    def of_kind(self, kind: str) -> tuple[LayerAnatomy, ...]:
        """The layers of one kind, e.g. every block's "attention"."""
        return tuple(l for l in self.layers if l.kind == kind)


# --- pure helpers (tested without torch) ------------------------------------------------------

def classify_mm(shapes, batch: int) -> str:
    """'W' if an mm contracts over the batch ([a, batch] @ [batch, b]), 'B' if it maps
    (batch, out) → (batch, in); raise when the shapes cannot tell (batch equals a width).
    `batch` is the rows a Linear sees: samples, or samples × tokens for a transformer."""
    (a0, a1), (b0, b1) = shapes[0], shapes[1]
    w_like, b_like = a1 == batch and b0 == batch, a0 == batch
    if w_like == b_like:
        raise ValueError(f"cannot tell input-gradient from weight-gradient work for mm {shapes} "
                         f"with batch {batch}: choose a batch size different from the layer widths")
    return "W" if w_like else "B"


def memory_events(trace: dict) -> list[tuple[float, int, int]]:
    """(ts µs, Addr, Bytes) of a chrome trace's `[memory]` events, in the order recorded."""
    return [(e["ts"], e["args"]["Addr"], e["args"]["Bytes"]) for e in trace["traceEvents"]
            if e.get("name") == "[memory]" and e.get("args", {}).get("Bytes")]


def kept_allocations(memory, start_us: float, end_us: float) -> dict[int, int]:
    """Addr → bytes of what was allocated in [start, end] and not freed by `end`.

    Frees of memory allocated before `start` (a negative `Bytes` at an unknown Addr) are ignored:
    they are not this window's allocations.
    """
    live: dict[int, int] = {}
    for ts, addr, nbytes in sorted(memory, key=lambda m: m[0]):   # stable: keeps trace order
        if ts < start_us:
            continue
        if ts > end_us:
            break
        if nbytes > 0:
            live[addr] = nbytes
        else:
            live.pop(addr, None)
    return live


def reconcile(kept: dict[int, int], saved: dict[int, int]) -> dict[str, int]:
    """The profiler's kept allocations vs the hooks' saved storages (pointer → bytes) of a block."""
    return dict(kept_bytes=sum(kept.values()), saved_bytes=sum(saved.values()),
                saved_elsewhere_bytes=sum(b for ptr, b in saved.items() if ptr not in kept),
                kept_unsaved_bytes=sum(b for addr, b in kept.items() if addr not in saved))


def linear_flops(batch: int, fan_in: int, fan_out: int) -> int:
    """Multiply-adds ×2 of one (batch, in) @ (in, out) product; B and W cost the same."""
    return 2 * batch * fan_in * fan_out

"""Tensor and sequence parallelism, the data side: what a measured Megatron MLP block records
per rank, and what Megatron's formulas expect from the shapes alone. No torch;
`dpviz.lessons.tensor_parallel.live` runs the ranks.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpviz.core.record import record_kind

MODES = ("tp", "tp+sp")
FLOAT_BYTES = 4            # float32 everywhere
# Which collective ran where, in Megatron's names (f: copy to TP region, g: reduce from it).
WHERE = {
    ("tp", "forward"): "g: all-reduce fc2 partial outputs",
    ("tp", "backward"): "f: all-reduce fc1 input grads",
    ("tp+sp", "forward", "all_gather"): "all-gather tokens before fc1",
    ("tp+sp", "forward", "reduce_scatter"): "reduce-scatter fc2 partials to token shards",
    ("tp+sp", "backward", "all_gather"): "all-gather output grads before fc2",
    ("tp+sp", "backward", "reduce_scatter"): "reduce-scatter fc1 input grads to token shards",
    ("tp+sp", "grad sync"): "all-reduce LayerNorm + fc2-bias grads (each saw S/N tokens)",
}


@dataclass(frozen=True)
class Collective:
    """One collective as this rank issued it; bytes of its input and output buffers."""

    op: str                  # all_reduce | all_gather | reduce_scatter
    phase: str               # forward | backward | grad sync
    where: str
    in_bytes: int
    out_bytes: int

    def ring_bytes(self, n: int) -> float:
        """Bytes each rank sends with a ring algorithm: (N−1)/N of the full tensor per phase.

        All-reduce runs two phases (reduce-scatter then all-gather); the others one.
        """
        full = max(self.in_bytes, self.out_bytes)
        return (2 if self.op == "all_reduce" else 1) * (n - 1) / n * full


@dataclass(frozen=True)
class SavedTensor:
    """A tensor autograd kept for backward (parameters excluded), by region of the block."""

    region: str              # layernorm | mlp
    shape: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class TPRank:
    """What one rank held and sent for one forward + backward of the block."""

    mode: str                # tp | tp+sp
    tp_size: int
    rank: int
    param_shapes: dict[str, tuple[int, ...]]
    param_bytes: dict[str, int]
    collectives: tuple[Collective, ...]
    saved: tuple[SavedTensor, ...]

    def comm_bytes(self, ring: bool = True, phases: tuple[str, ...] = ("forward", "backward")) -> float:
        """Activation traffic per step: ring bytes sent per rank, or buffer sizes (ring=False)."""
        return sum(c.ring_bytes(self.tp_size) if ring else max(c.in_bytes, c.out_bytes)
                   for c in self.collectives if c.phase in phases)

    def saved_bytes(self, region: str, hidden_only: bool = False) -> int:
        """Activation bytes kept for backward in a region; `hidden_only`: the H/N-wide ones."""
        hidden = self.param_shapes["fc1.weight"][0]
        return sum(s.bytes for s in self.saved
                   if s.region == region and (not hidden_only or s.shape[-1] == hidden))


@dataclass(frozen=True)
class EqualityCheck:
    """max |Δ| of output, input grad and every reassembled parameter grad vs a reference."""

    tp_size: int
    mode: str
    against: str             # "single process" or "tp"
    max_abs_diff: dict[str, float]

    @property
    def worst(self) -> float:
        return max(self.max_abs_diff.values())


@record_kind("tensor_parallel")
@dataclass(frozen=True)
class TensorParallelRecord:
    """TP and TP+SP of one MLP block at several TP sizes, measured on every rank."""

    config: dict             # seq, batch, d_model, hidden, seed
    ranks: tuple[TPRank, ...]
    checks: tuple[EqualityCheck, ...]

    def rows(self, mode: str, tp_size: int) -> list[TPRank]:
        return sorted((r for r in self.ranks if r.mode == mode and r.tp_size == tp_size),
                      key=lambda r: r.rank)

    @property
    def tp_sizes(self) -> list[int]:
        return sorted({r.tp_size for r in self.ranks})


def expected(config: dict, tp_size: int, mode: str) -> dict[str, float]:
    """What each rank should hold and send, from the shapes alone (Megatron's formulas)."""
    s, b, d, h = (config[k] for k in ("seq", "batch", "d_model", "hidden"))
    n = tp_size
    tokens = s // n if mode == "tp+sp" else s              # tokens per rank in the LN region
    act = s * b * d * FLOAT_BYTES                           # one full (S, B, D) activation
    return {
        "sharded param bytes": (2 * h * d + h) * FLOAT_BYTES // n,   # W1, b1, W2
        "replicated param bytes": 3 * d * FLOAT_BYTES,              # LN weight, bias; fc2 bias
        "hidden activation bytes": 2 * s * b * h // n * FLOAT_BYTES,  # pre- and post-GELU
        "layernorm activation bytes": tokens * b * (d + 2) * FLOAT_BYTES,  # input, mean, rstd
        "all-reduce buffer bytes": act,
        "ring bytes per step": 4 * (n - 1) / n * act,       # 2 all-reduces = 2 AG + 2 RS
        "grad sync ring bytes": (2 * (n - 1) / n * 3 * d * FLOAT_BYTES) if mode == "tp+sp" else 0.0,
    }

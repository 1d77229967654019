"""Bandwidth of collectives: the "bench" record, nccl-tests' busBW, and the alpha-beta model.

nccl-tests' definitions (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md), with S the total
size of the operation in bytes and t its time:
    algBW = S / t
    busBW = algBW × factor(op, n): all-reduce 2(n−1)/n; reduce-scatter and all-gather (n−1)/n;
            broadcast and reduce 1.
busBW is the rate each rank's link must sustain, so it compares across rank counts and with
the hardware's link speed (the seed's 4×V100 NVLink: ~130 GB/s measured at 128 MB).

Alpha-beta model: t(n_bytes) = α + n_bytes·β. α is the fixed cost of a call (software, sync,
per-hop latency), 1/β the bandwidth. Below the knee n = α/β the fixed cost dominates and the
time hardly changes with size: small messages waste the link.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ..record import record_kind
from .algorithms import ALGORITHMS

FACADE = ("fit_alpha_beta",)  # what `dpviz.<name>` offers from here

# dpviz's own algorithms are all-reduces: they share all_reduce's bus factor
TORCH_OPS = ("all_reduce", "reduce_scatter", "all_gather")
OPS = TORCH_OPS + tuple(ALGORITHMS)
GB = 1e9  # nccl-tests reports decimal GB/s


def bus_factor(op: str, world_size: int) -> float:
    """busBW / algBW for `op` on `world_size` ranks (nccl-tests)."""
    n = world_size
    if op == "all_reduce" or op in ALGORITHMS:
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather"):
        return (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"no bus factor for {op!r}; known: {', '.join(OPS + ('broadcast', 'reduce'))}")


def algbw_gbps(nbytes: int, time_ms: float) -> float:
    return nbytes / (time_ms * 1e-3) / GB


def busbw_gbps(op: str, world_size: int, nbytes: int, time_ms: float) -> float:
    return algbw_gbps(nbytes, time_ms) * bus_factor(op, world_size)


@dataclass(frozen=True)
class BenchRow:
    """One op at one size on one rank count: the median of `repeats` timed calls."""

    op: str
    world_size: int
    bytes: int               # S, the total size (all-gather: the gathered output)
    time_ms: float           # median over repeats of the slowest rank's time
    algbw_gbps: float
    busbw_gbps: float
    times_ms: tuple[float, ...] = ()   # every repeat, slowest rank


@record_kind("bench")
@dataclass(frozen=True)
class BenchRecord:
    rows: tuple[BenchRow, ...]
    warmup: int
    repeats: int
    backend: str = "gloo"
    cpu_count: int = 0
    notes: tuple[str, ...] = ()

    def select(self, op: str | None = None, world_size: int | None = None) -> list[BenchRow]:
        return [r for r in self.rows if (op is None or r.op == op)
                and (world_size is None or r.world_size == world_size)]

    @property
    def series(self) -> list[tuple[str, int]]:
        """(op, world_size) pairs in the order they were measured."""
        return list(dict.fromkeys((r.op, r.world_size) for r in self.rows))


def make_row(op: str, world_size: int, nbytes: int, times_ms: Sequence[float]) -> BenchRow:
    """A row from the repeats' times: median time, then algBW and busBW from it."""
    ordered = sorted(times_ms)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return BenchRow(op, world_size, nbytes, median, algbw_gbps(nbytes, median),
                    busbw_gbps(op, world_size, nbytes, median), tuple(times_ms))


# --- the alpha-beta model -------------------------------------------------------------------

@dataclass(frozen=True)
class AlphaBeta:
    """t = α + n·β fitted to one op on one rank count."""

    op: str
    world_size: int
    alpha_ms: float
    beta_ms_per_byte: float

    def time_ms(self, nbytes: float) -> float:
        return self.alpha_ms + nbytes * self.beta_ms_per_byte

    @property
    def bandwidth_gbps(self) -> float:
        """1/β: the algBW a very large message approaches."""
        return float("inf") if self.beta_ms_per_byte == 0 else 1e3 / self.beta_ms_per_byte / GB

    @property
    def knee_bytes(self) -> float:
        """α/β: the size where fixed cost and transfer time are equal (half the peak algBW)."""
        return float("inf") if self.beta_ms_per_byte == 0 else self.alpha_ms / self.beta_ms_per_byte


def fit_alpha_beta(rows: Iterable[BenchRow]) -> AlphaBeta:
    """Least squares on relative error, so 1 KB and 64 MB points weigh alike; α, β ≥ 0.

    Minimises Σ ((α + β·n_i − t_i) / t_i)²: a 2×2 linear system.
    """
    rows = list(rows)
    keys = {(r.op, r.world_size) for r in rows}
    if len(keys) != 1:
        raise ValueError(f"fit one op on one rank count at a time, got {sorted(keys)}")
    if len({r.bytes for r in rows}) < 2:
        raise ValueError("the alpha-beta fit needs at least two different sizes")
    a = [1 / r.time_ms for r in rows]            # ∂/∂α of each relative residual
    b = [r.bytes / r.time_ms for r in rows]      # ∂/∂β
    saa, sab, sbb = sum(x * x for x in a), sum(x * y for x, y in zip(a, b)), sum(y * y for y in b)
    sa, sb = sum(a), sum(b)                      # right-hand side: Σ a_i·1, Σ b_i·1
    det = saa * sbb - sab * sab
    alpha, beta = (sa * sbb - sb * sab) / det, (saa * sb - sab * sa) / det
    if alpha < 0:      # time proportional to size: no measurable fixed cost
        alpha, beta = 0.0, sb / sbb
    elif beta < 0:     # time flat in size: latency only
        alpha, beta = sa / saa, 0.0
    op, world_size = keys.pop()
    return AlphaBeta(op, world_size, alpha, beta)


def fit_all(record: BenchRecord) -> list[AlphaBeta]:
    """One fit per (op, world_size) in the record."""
    return [fit_alpha_beta(record.select(op, n)) for op, n in record.series]

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

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from dpviz.core.link import as_link, describe_link
from dpviz.core.record import record_kind
from dpviz.lessons.collectives.algorithms import ALGORITHMS

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
    link: dict | None = None   # the emulated wire the all-reduces crossed; None: raw loopback

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


def _log_slope(rows: Sequence[BenchRow]) -> float:
    """Least-squares slope of log(time) against log(bytes): 0 flat, 1 time ∝ size."""
    xs, ys = [math.log(r.bytes) for r in rows], [math.log(r.time_ms) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


@dataclass(frozen=True)
class Shape:
    """Whether one series has the alpha-beta shape on this run, and what breaks it: read from
    its rows by `shape_of`, printed by `describe_shape` and named in `plot_busbw`'s title, so
    the figure never states a shape the printed verdict denies."""

    op: str
    rows: tuple[BenchRow, ...]   # by size
    left: float                  # log-log slope over the three smallest sizes (0: flat)
    right: float                 # ... over the three largest (1: slope one)
    falls: tuple[tuple[BenchRow, BenchRow], ...]   # consecutive sizes whose time fell

    @property
    def breaks(self) -> list[str]:
        """What keeps it from the alpha-beta shape; empty when it has it."""
        return [why for why, bad in (("small messages not flat", self.left >= 0.3),
                                     ("large messages not rising toward slope one", self.right <= 0.5),
                                     ("not monotonic", bool(self.falls))) if bad]

    @property
    def verdict(self) -> str:
        return ("the alpha-beta shape (flat, then rising toward slope one)" if not self.breaks
                else f"not the alpha-beta shape on this run ({'; '.join(self.breaks)})")


def shape_of(record: BenchRecord, op: str = "all_reduce") -> Shape:
    """The shape of `op`'s series: flat for small messages (log-log slope near 0), slope one
    for large ones, time never falling as size grows (raw loopback on shared cores often has not)."""
    rows = tuple(sorted(record.select(op), key=lambda r: r.bytes))
    if len({r.bytes for r in rows}) < 6:
        raise ValueError("the shape needs at least six sizes (three small, three large)")
    return Shape(op, rows, _log_slope(rows[:3]), _log_slope(rows[-3:]),
                 tuple((a, b) for a, b in zip(rows, rows[1:]) if b.time_ms < a.time_ms))


def describe_shape(record: BenchRecord, op: str = "all_reduce") -> str:
    """`shape_of`'s slopes, the sizes whose time fell, and the verdict, as lines to print."""
    shape = shape_of(record, op)
    rows = shape.rows
    lines = [f"{op}: log-log slope {shape.left:.2f} over {_size_label(rows[0].bytes)}-{_size_label(rows[2].bytes)} "
             f"(0 is flat: latency-bound), {shape.right:.2f} over {_size_label(rows[-3].bytes)}-{_size_label(rows[-1].bytes)} "
             "(1 is slope one: bandwidth-bound)"]
    if shape.falls:
        lines.append("time fell as size grew: " + ", ".join(
            f"{_size_label(a.bytes)} {a.time_ms:.2f} ms → {_size_label(b.bytes)} {b.time_ms:.2f} ms"
            for a, b in shape.falls))
    lines.append(f"verdict: {shape.verdict}")
    return "\n".join(lines)


def _size_label(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB" if nbytes >= 1 << 10 else f"{nbytes} B"


def fit_all(record: BenchRecord) -> list[AlphaBeta]:
    """One fit per (op, world_size) in the record."""
    return [fit_alpha_beta(record.select(op, n)) for op, n in record.series]


# --- the emulated link's own alpha-beta, and how well a fit recovers it ---------------------

def link_alpha_beta(link, world_size: int, op: str = "all_reduce") -> AlphaBeta:
    """The emulated link's promise as an alpha-beta model in the bench's units: α its latency,
    β the time per byte of S (a ring all-reduce puts 2(N−1)/N·S on each rank's link)."""
    link = as_link(link)
    if link is None:
        raise ValueError("raw loopback has no link model: pass a preset name or a Link")
    beta = link.transfer_ms(1 << 20, world_size) - link.transfer_ms(0, world_size)
    return AlphaBeta(op, world_size, link.latency_us / 1e3, beta / (1 << 20))


def link_fit_errors(linked: BenchRecord, raw: BenchRecord, op: str = "all_reduce") -> tuple[float, float]:
    """How far the fit over the emulated link, less the raw loopback's fit (the real
    all-reduce that runs after each transfer), is from the link's own α and β: relative
    errors (α, β). The rest is the link thread's wake-up and hand-offs (no CPU model)."""
    n = linked.series[0][1]
    fit, bare = fit_alpha_beta(linked.select(op, n)), fit_alpha_beta(raw.select(op, n))
    model = link_alpha_beta(linked.link, n, op)
    return ((fit.alpha_ms - bare.alpha_ms) / model.alpha_ms - 1,
            (fit.beta_ms_per_byte - bare.beta_ms_per_byte) / model.beta_ms_per_byte - 1)


def describe_link_fit(linked: BenchRecord, raw: BenchRecord, op: str = "all_reduce") -> str:
    """The verdict of 02's bandwidth lesson, from two benches on the same ranks and sizes:
    the fit over the emulated link against the link's own α and β, and raw loopback beside
    it (the real all-reduce each transfer is followed by, and the contrast)."""
    if linked.link is None or raw.link is not None:
        raise ValueError("pass the bench with a link first, then the raw loopback one")
    n = linked.series[0][1]
    fit, bare = fit_alpha_beta(linked.select(op, n)), fit_alpha_beta(raw.select(op, n))
    model = link_alpha_beta(linked.link, n, op)
    da, db = link_fit_errors(linked, raw, op)
    return "\n".join([
        f"{describe_link(linked.link)}, {n} ranks, {op}:",
        f"  fit:        α = {fit.alpha_ms:.3f} ms, β = {fit.beta_ms_per_byte * 1e6:.2f} ns/B "
        f"(1/β = {fit.bandwidth_gbps:.4f} GB/s)",
        f"  raw loopback (the real all-reduce after each transfer): α = {bare.alpha_ms:.3f} ms, "
        f"β = {bare.beta_ms_per_byte * 1e6:.2f} ns/B (1/β = {bare.bandwidth_gbps:.2f} GB/s)",
        f"  fit − raw:  α = {fit.alpha_ms - bare.alpha_ms:.3f} ms vs the link's {model.alpha_ms:.3f} ms ({da:+.0%}), "
        f"β = {(fit.beta_ms_per_byte - bare.beta_ms_per_byte) * 1e6:.2f} vs {model.beta_ms_per_byte * 1e6:.2f} ns/B ({db:+.0%})",
        f"  verdict: the fit recovers the link's β within {abs(db):.0%} and its α within {abs(da):.0%}"
        + (" (α above it: likely the link thread waking late from its sleep and the hand-offs between threads, not measured here)"
           if da > 0.1 else ""),
        f"  raw loopback alone is {bare.bandwidth_gbps / fit.bandwidth_gbps:.0f}× faster per byte than the link: "
        f"gloo adds on the CPU cores that also compute, no wire at all"])

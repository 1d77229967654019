"""gloo under load, as the what-if model uses it: how fast an all-reduce progresses beside
backward's compute and beside another all-reduce, and how fast compute runs beside it.

A source run's all-reduces mostly run one at a time after backward (a slow link), so the cost
the model learns from it is an all-reduce's cost alone. With a faster link or a smaller cap
they run beside backward and beside each other on the same cores, and there gloo's threads
and the ranks' compute threads share those cores unevenly. The rates here come from
`dpviz.lessons.collectives.timing.all_reduce_under_load_rank`, run on the same ranks as the
source (`measure_load` in `dpviz.lessons.what_if.live`): each is a measurement of this
machine at one world size, never a constant, and a record saved with them predicts again
without a run. No torch here.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import astuple, dataclass

from dpviz.core.record import record_kind

LOWEST_RATE = 0.02   # a rate is clamped here: "starved" still ends once the load is gone


@dataclass(frozen=True)
class LoadArms:
    """One size's arms, ms: medians over repeats (`load_from_rows`)."""

    bytes: int
    alone_ms: float              # the all-reduce alone
    pair_first_ms: float         # the first of two started at once
    compute_ms: float            # the compute burst alone
    beside_compute_ms: float     # the burst with an all-reduce in flight beside it
    beside_all_reduce_ms: float  # that all-reduce, seen done

    def rates(self) -> Rates:
        """Progress rates (work alone per ms) read off the arms. An all-reduce seen done before
        the burst ended progressed at `alone / seen` throughout, and the burst ran at a speed
        that makes its work fit; one done after the burst progressed at 1 once the burst was
        over, so the rest of its work is what it did beside it."""
        a, b, bc, r = self.alone_ms, self.compute_ms, self.beside_compute_ms, self.beside_all_reduce_ms
        if r < bc:
            beside, compute = a / r, (b - bc + r) / r
        else:
            beside, compute = (a - (r - bc)) / bc, b / bc
        return Rates(_clamp(beside), _clamp(compute), _clamp(a / self.pair_first_ms))


@dataclass(frozen=True)
class Rates:
    """Work alone per ms: an all-reduce beside a computing backward, backward beside an
    all-reduce in flight, one of two all-reduces in flight at once."""

    reduce_beside_compute: float
    compute_beside_reduce: float
    reduce_paired: float


def _clamp(rate: float) -> float:
    return min(1.0, max(LOWEST_RATE, rate))


@record_kind("gloo_load")
@dataclass(frozen=True)
class GlooLoad:
    """gloo's all-reduce under load at one world size on one machine (see the module)."""

    world_size: int
    arms: tuple[LoadArms, ...]   # by size, ascending
    burst: int                   # 128×128 matmuls per compute burst
    repeats: int
    source: str = "live"

    def rates(self, nbytes: float) -> Rates:
        """The rates at `nbytes`: interpolated on log-size between the measured sizes, the
        nearest one's outside them."""
        points = sorted(self.arms, key=lambda x: x.bytes)
        if nbytes <= points[0].bytes:
            return points[0].rates()
        for lo, hi in zip(points, points[1:]):
            if nbytes <= hi.bytes:
                w = math.log(nbytes / lo.bytes) / math.log(hi.bytes / lo.bytes)
                pairs = zip(astuple(lo.rates()), astuple(hi.rates()))
                return Rates(*(x + w * (y - x) for x, y in pairs))
        return points[-1].rates()

    def describe(self) -> str:
        """One line a size: the arms' ratios and the rates the model takes from them."""
        lines = [f"gloo under load, {self.world_size} ranks ({self.source}, median of {self.repeats}):"]
        for x in sorted(self.arms, key=lambda x: x.bytes):
            r = x.rates()
            lines.append(f"  {x.bytes / 2**20:4.1f} MiB: alone {x.alone_ms:.2f} ms; beside compute the all-reduce "
                         f"progresses at {r.reduce_beside_compute:.2f}, compute at {r.compute_beside_reduce:.2f}; "
                         f"two at once each at {r.reduce_paired:.2f}")
        return "\n".join(lines)


def work_done(start: float, end: float, slowed: list[tuple[float, float, float]]) -> float:
    """How much work alone an all-reduce did from `start` to `end`, running at the product of
    the rates of every (from, until, rate) in force (the inverse of the model's `_progress`)."""
    edges = sorted({start, end, *(x for a, b, _ in slowed for x in (a, b) if start < x < end)})
    return sum((hi - lo) * math.prod(rate for a, b, rate in slowed if a <= lo and hi <= b)
               for lo, hi in zip(edges, edges[1:]))


def load_from_rows(world_size: int, per_size: dict[int, list[list[dict[str, float]]]], burst: int,
                   from_last_join: bool = True) -> GlooLoad:
    """A GlooLoad from the rank task's rows (per size: per rank, per repeat, when each arm
    started and ended, ms on one clock): the median over repeats. A collective is timed from
    when its last rank joined to when its slowest rank saw it done, the way the model learns
    an all-reduce's cost (the earlier ranks' wait is the skew of leaving a barrier, not gloo's
    work); a compute burst is each rank's own, the slowest rank's. `from_last_join=False`:
    collectives too as each rank's own span (the older reading, which
    benchmarks/gloo_under_load.py compares)."""
    arms = []
    for nbytes, ranks in sorted(per_size.items()):
        arms.append(LoadArms(nbytes, _median_span(ranks, "alone_start", "alone_end", from_last_join),
                             _median_span(ranks, "pair_start", "pair_first", from_last_join),
                             _median_span(ranks, "compute_start", "compute_end", False),
                             _median_span(ranks, "beside_start", "beside_end", False),
                             _median_span(ranks, "beside_start", "beside_seen", from_last_join)))
    return GlooLoad(world_size, tuple(arms), burst, len(next(iter(per_size.values()))[0]))


def _median_span(ranks: list[list[dict[str, float]]], start: str, end: str, from_last_join: bool) -> float:
    """The median over repeats of one arm's span: from the last rank's `start` to the last
    rank's `end` (`from_last_join`), else the slowest rank's own span."""
    def span(i: int) -> float:
        if from_last_join:
            return max(r[i][end] for r in ranks) - max(r[i][start] for r in ranks)
        return max(r[i][end] - r[i][start] for r in ranks)
    return statistics.median(span(i) for i in range(len(ranks[0])))

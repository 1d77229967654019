"""Timing verdicts that survive a busy machine: when two settings' runs differ, and when not.

A timing lesson compares two settings (arm A, arm B: buckets against one bucket, prefetch on
against off) by one quantity per run (its link wait, say). On a shared CPU the runs of one
setting spread widely, and load drifts while they run; so the arms run interleaved (A B A B …,
`dpviz.engine.verdicts.interleave`: a burst of load lands on both), and a difference is named
only when it is beyond the spread, by this rule:

**The rule** (Mann-Whitney, exact, with the looks paid for). After each pair of runs with n ≥
MIN_RUNS runs per arm, U counts the pairs (a, b) with a > b (a tie counts ½). If the two arms'
runs come from one distribution, every order of the 2n values is equally likely, so U's exact
distribution is a count of orders (`_u_counts`) and the two-sided p = 2·P(U ≤ min(U, n² − U))
(half-counts rounded up: conservative). The arms differ when p ≤ ALPHA / ((n − 3)(n − 2)):
looking again after every pair, the chance that arms which do not differ are ever called
different is at most Σₙ≥₄ ALPHA / ((n − 3)(n − 2)) = ALPHA (a telescoping sum: 1/(k(k+1)) over
k ≥ 1 is 1). ALPHA = 0.06 lets the first look (n = 4, threshold 0.03) decide on complete
separation (all four of one arm below all four of the other: p = 2/C(8,4) = 0.029), and asks
more of later looks (n = 5: 0.01, n = 6: 0.005). The verdict also asks that the medians order
the arms the same way. Until then, or when the time cap is hit first, the verdict says it
cannot tell, and within what.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import lru_cache
from math import ceil

from dpviz.analysis.overlap import quartiles

ALPHA = 0.06          # the chance, over every look, of naming a difference that is not there
MIN_RUNS = 4          # runs per arm before the first look (complete separation at 4: p = 0.029)


@lru_cache(maxsize=None)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """How many orders of n + m distinct values give each U = 0 … n·m (U: pairs with the
    n-side value above the m-side one). The largest value is either on the n side (it beats
    all m: U shifts by m) or on the m side (it beats nothing)."""
    if n == 0 or m == 0:
        return (1,)
    out = [0] * (n * m + 1)
    for u, c in enumerate(_u_counts(n - 1, m)):
        out[u + m] += c
    for u, c in enumerate(_u_counts(n, m - 1)):
        out[u] += c
    return tuple(out)


def u_statistic(a: list[float], b: list[float]) -> float:
    """Pairs (x from a, y from b) with x > y, a tie counting ½."""
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Exact two-sided p that samples `a` and `b` come from one distribution."""
    counts = _u_counts(len(a), len(b))
    u = u_statistic(a, b)
    tail = ceil(min(u, len(a) * len(b) - u))
    return min(1.0, 2 * sum(counts[: tail + 1]) / sum(counts))


def threshold(n: int) -> float:
    """The p a look with `n` runs per arm must reach (see the module docstring)."""
    return ALPHA / ((n - 3) * (n - 2)) if n >= MIN_RUNS else 0.0


@dataclass(frozen=True)
class Comparison:
    """Two arms' runs, one value each (ms), and what they say.

    `lower` is the arm whose values are lower beyond the spread, None when the runs cannot
    tell (`reason` then says why: too few runs, or the time cap)."""

    quantity: str                      # what was compared, e.g. "link wait"
    names: tuple[str, str]
    a: tuple[float, ...]
    b: tuple[float, ...]
    p: float
    lower: str | None
    elapsed_s: float = 0.0
    cap_s: float | None = None
    unit: str = "ms"

    def median(self, arm: int) -> float:
        return statistics.median((self.a, self.b)[arm])

    def iqr(self, arm: int) -> tuple[float, float]:
        return quartiles(list((self.a, self.b)[arm]))

    @property
    def difference_ms(self) -> float:
        """Median of b minus median of a (positive: a is lower), in `unit`."""
        return self.median(1) - self.median(0)


def judge(quantity: str, names: tuple[str, str], a: list[float], b: list[float],
          elapsed_s: float = 0.0, cap_s: float | None = None, unit: str = "ms") -> Comparison:
    """The verdict on two arms' runs by the module's rule."""
    if len(a) != len(b) or not a:
        raise ValueError(f"interleaved arms have as many runs each (at least one), got {len(a)} and {len(b)}")
    p = mann_whitney_p(a, b)
    gap = statistics.median(b) - statistics.median(a)
    lower = None
    if p <= threshold(len(a)) and gap:
        lower = names[0] if gap > 0 else names[1]
    return Comparison(quantity, tuple(names), tuple(a), tuple(b), p, lower, elapsed_s, cap_s, unit)


def describe_comparison(c: Comparison) -> str:
    """One line: the verdict and the numbers it rests on (medians, IQRs, runs, p)."""
    def arm(i: int) -> str:
        lo, hi = c.iqr(i)
        return f"{c.names[i]} {c.median(i):.1f} {c.unit} (IQR {lo:.1f}-{hi:.1f})"

    need = (f"this look needs ≤ {threshold(len(c.a)):.2g}" if len(c.a) >= MIN_RUNS
            else f"no verdict before {MIN_RUNS} runs each")
    numbers = (f"{c.quantity}, medians of {len(c.a)} interleaved runs each: {arm(0)}, {arm(1)}; "
               f"Mann-Whitney p = {c.p:.3f} ({need})")
    if c.lower is not None:
        higher = c.names[1] if c.lower == c.names[0] else c.names[0]
        return (f"{c.lower} has less {c.quantity} than {higher}, by {abs(c.difference_ms):.1f} {c.unit}, "
                f"beyond the spread: {numbers}")
    why = (f"within the {c.cap_s:g} s cap" if c.cap_s is not None and c.elapsed_s >= c.cap_s
           else f"in {len(c.a)} runs each")
    return f"cannot tell which has less {c.quantity} {why} ({c.elapsed_s:.0f} s): {numbers}"

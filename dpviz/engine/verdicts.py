"""Run a timing lesson's two arms interleaved on warm ranks until they differ beyond the
spread, or a time cap says the runs cannot tell (the rule: `dpviz.analysis.verdict`).

Order within each pair alternates (A B, B A, A B, …): load that rises or falls steadily through
a pair then favours neither arm. A section whose link was sized to a backward that no longer
holds (the runs' backward beyond `SIZING_TOLERANCE`× the sizing one, either way: the machine's
load changed) re-sizes the link and runs again, once, saying so.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Generic, Mapping, TypeVar

from dpviz.analysis.verdict import MIN_RUNS, Comparison, judge
from dpviz.core.link import SIZING_TOLERANCE, Link, sizing_factor

R = TypeVar("R")
CAP_S = 40.0        # a lesson's comparison stops here at the latest: a learner waits for it
MAX_RUNS = 12       # runs per arm at most (the rule's later looks ask p ≤ 0.06 / 90 at n = 12)


def interleave(arms: Mapping[str, Callable[[], R]], measure: Callable[[R], float], *, quantity: str,
               cap_s: float = CAP_S, max_runs: int = MAX_RUNS, clock=time.monotonic
               ) -> tuple[Comparison, dict[str, list[R]]]:
    """Run the two `arms` in alternating pairs, `measure` each run, and stop when the rule
    tells them apart (from MIN_RUNS runs each), when `max_runs` pairs ran, or when `cap_s`
    seconds passed, but not before MIN_RUNS runs each: a cap that stopped before the rule's
    first look would make "cannot tell" a foregone conclusion on a slow machine. Returns the
    verdict and every arm's runs."""
    if len(arms) != 2:
        raise ValueError(f"a comparison has two arms, got {list(arms)}")
    if cap_s <= 0 or max_runs < MIN_RUNS:
        raise ValueError(f"need cap_s > 0 and max_runs >= {MIN_RUNS}, got {cap_s}, {max_runs}")
    names = tuple(arms)
    runs: dict[str, list[R]] = {n: [] for n in names}
    values: dict[str, list[float]] = {n: [] for n in names}
    start = clock()
    for i in range(max_runs):
        for name in (names if i % 2 == 0 else names[::-1]):
            runs[name].append(arms[name]())
            values[name].append(measure(runs[name][-1]))
        elapsed = clock() - start
        verdict = judge(quantity, names, values[names[0]], values[names[1]], elapsed, cap_s)
        if verdict.lower is not None or (elapsed >= cap_s and i + 1 >= MIN_RUNS):
            break
    return verdict, runs


def check_cap_s(cap_s: float | None) -> float:
    """A comparison's time cap (None: CAP_S), or a ValueError before any rank starts."""
    cap_s = CAP_S if cap_s is None else cap_s
    if isinstance(cap_s, bool) or not isinstance(cap_s, (int, float)) or not cap_s > 0:
        raise ValueError(f"cap_s must be a number of seconds > 0, got {cap_s!r}")
    return float(cap_s)


@dataclass(frozen=True)
class SizedComparison(Generic[R]):
    """A comparison on a link: its verdict, runs, the link they ran on, the runs' backward
    (None where nothing sized the link) and whether (and why) the link was re-sized and the
    section run again."""

    comparison: Comparison
    runs: dict[str, list[R]]
    link: Link | None
    backward_ms: float | None = None
    resized: str | None = None


def compare_on_link(link: Link | None, arms: Mapping[str, Callable[[Link | None], R]],
                    measure: Callable[[R], float], *, quantity: str, cap_s: float | None = None,
                    backward_of: Callable[..., float] | None = None,
                    resize: Callable[[], Link] | None = None) -> SizedComparison[R]:
    """`interleave` the arms on `link`. With `backward_of` (a backward from runs,
    `backward_of(*runs)`) and `resize`, a link sized to a backward the first arm's runs (the
    setting it was sized on) no longer have (beyond SIZING_TOLERANCE either way) is re-sized
    (`resize()`) and the comparison run again on it, once, saying so in `resized`."""
    cap_s = check_cap_s(cap_s)

    def once(on: Link | None) -> SizedComparison[R]:
        verdict, runs = interleave({n: (lambda f=f: f(on)) for n, f in arms.items()}, measure,
                                   quantity=quantity, cap_s=cap_s)
        sized_like = runs[next(iter(arms))]   # the first arm runs as the link was sized
        return SizedComparison(verdict, runs, on, None if backward_of is None else backward_of(*sized_like))

    first = once(link)
    factor = None if link is None or first.backward_ms is None else sizing_factor(link, first.backward_ms)
    if resize is None or factor is None or 1 / SIZING_TOLERANCE <= factor <= SIZING_TOLERANCE:
        return first
    again = once(resize())
    note = (f"the {next(iter(arms))} runs' backward, {first.backward_ms:.1f} ms, was {factor:.2f}× the {link.sized_to_ms:g} ms "
            f"the link was sized to (beyond {SIZING_TOLERANCE:g}×: the machine's load changed), so the link "
            f"was re-sized to {again.link.gbps:g} Gb/s (backward {again.link.sized_to_ms:g} ms) and the "
            f"section ran again; the first verdict was: {first.comparison.lower or 'cannot tell'}")
    return SizedComparison(again.comparison, again.runs, again.link, again.backward_ms, note)

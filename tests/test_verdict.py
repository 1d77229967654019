"""Timing verdicts: the statistics on synthetic samples, the interleaving driver and its
re-size trigger (on plain callables: what they run is not the point), and the split of
exposed communication into link wait and peer wait on a live run with a known straggler."""
from __future__ import annotations

import itertools
import random
from math import comb

import pytest

from dpviz.analysis.verdict import (
    ALPHA, MIN_RUNS, describe_comparison, judge, mann_whitney_p, threshold, u_statistic,
)
from dpviz.core.link import Link
from dpviz.engine.verdicts import compare_on_link, interleave


def test_exact_p_counts_orders():
    """Complete separation of n against n: 2 of the C(2n, n) equally likely orders; and for 3
    against 4 the p of every split equals the share of orders at least as extreme, counted."""
    for n in (3, 4, 5, 6):
        assert mann_whitney_p(list(range(n)), list(range(n, 2 * n))) == pytest.approx(2 / comb(2 * n, n))
    values = set(range(7))
    splits = [(list(a), sorted(values - set(a))) for a in itertools.combinations(values, 3)]
    us = [u_statistic(a, b) for a, b in splits]
    for a, b in splits:
        extreme = min(u_statistic(a, b), 12 - u_statistic(a, b))
        counted = sum(min(u, 12 - u) <= extreme for u in us) / len(us)
        assert mann_whitney_p(a, b) == pytest.approx(min(1.0, counted))


def test_the_looks_cost_at_most_alpha():
    """The thresholds telescope: Σ ALPHA/((n-3)(n-2)) over n >= 4 approaches ALPHA."""
    assert sum(threshold(n) for n in range(MIN_RUNS, 10_000)) == pytest.approx(ALPHA, rel=1e-3)
    assert threshold(MIN_RUNS - 1) == 0.0 and threshold(4) >= 2 / comb(8, 4)


def test_separated_samples_get_a_verdict_and_overlapping_ones_cannot_tell():
    separated = judge("link wait", ("buckets", "one bucket"), [10.1, 11.0, 9.8, 10.5], [20.2, 19.5, 21.0, 20.1])
    assert separated.lower == "buckets" and separated.difference_ms > 0
    line = describe_comparison(separated)
    assert line.startswith("buckets has less link wait than one bucket") and "10.3" in line
    mixed = judge("link wait", ("buckets", "one bucket"), [10, 14, 9, 13], [11, 12, 15, 8])
    assert mixed.lower is None and describe_comparison(mixed).startswith("cannot tell")
    # complete separation at 3 runs each is not enough (p = 0.1 > any threshold)
    assert judge("x", ("a", "b"), [1, 2, 3], [4, 5, 6]).lower is None


def test_interleave_alternates_and_stops_when_told_apart():
    order = []
    rng = random.Random(0)

    def arm(name, centre):
        def run():
            order.append(name)
            return centre + rng.uniform(-1, 1)
        return run

    verdict, runs = interleave({"a": arm("a", 10), "b": arm("b", 20)}, float, quantity="q")
    assert verdict.lower == "a" and len(runs["a"]) == MIN_RUNS   # separated from the first look
    assert order[:4] == ["a", "b", "b", "a"]


def test_interleave_says_cannot_tell_at_the_cap():
    ticks = itertools.count()
    rng = random.Random(1)
    verdict, runs = interleave({"a": lambda: rng.random(), "b": lambda: rng.random()}, float,
                               quantity="q", cap_s=5, clock=lambda: next(ticks))
    assert verdict.lower is None and len(runs["a"]) == 5 and "within the 5 s cap" in describe_comparison(verdict)
    # a cap passed before the rule's first look still lets it look once
    ticks = itertools.count()
    verdict, runs = interleave({"a": lambda: rng.random(), "b": lambda: rng.random()}, float,
                               quantity="q", cap_s=1, clock=lambda: next(ticks))
    assert len(runs["a"]) == MIN_RUNS


def test_a_drifted_backward_resizes_the_link_once():
    """The runs' backward is 0.46x the sized one (beyond 1/1.5): the link is re-sized and the
    comparison re-run on it; at 1.2x it is kept."""
    sized = Link(gbps=1.0, latency_us=100.0, sized_to_ms=50.0)
    resized = Link(gbps=2.0, latency_us=100.0, sized_to_ms=23.0)
    used = []

    def run_on(centre):
        return lambda link: (used.append(link), centre + random.random())[1]

    arms = {"a": run_on(1.0), "b": run_on(5.0)}
    out = compare_on_link(sized, arms, float, quantity="q", backward_of=lambda *runs: 23.0, resize=lambda: resized)
    assert out.link is resized and "0.46×" in out.resized and "re-sized" in out.resized
    assert used[0] is sized and used[-1] is resized and out.comparison.lower == "a"
    used.clear()
    kept = compare_on_link(sized, arms, float, quantity="q", backward_of=lambda *runs: 60.0, resize=lambda: resized)
    assert kept.link is sized and kept.resized is None and set(map(id, used)) == {id(sized)}


def test_before_the_first_look_the_line_says_why_there_is_no_verdict():
    line = describe_comparison(judge("link wait", ("a", "b"), [1, 2, 3], [7, 8, 9], elapsed_s=50, cap_s=40))
    assert "within the 40 s cap" in line and f"no verdict before {MIN_RUNS} runs each" in line

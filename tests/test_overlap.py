"""Interval maths behind overlap and exposed communication (pure, no ranks)."""
from __future__ import annotations

from dpviz.record import Span
from dpviz.overlap import intersection, length, summarize_step, union


def test_union_and_intersection():
    assert union([(5, 6), (0, 2), (1, 3)]) == [(0, 3), (5, 6)]
    assert length([(0, 2), (1, 3), (10, 11)]) == 4
    assert intersection([(0, 10)], [(2, 3), (5, 7), (9, 12)]) == 1 + 2 + 1
    assert intersection([(0, 1)], [(1, 2)]) == 0


def _span(kind, start, end, tid="main"):
    return Span(rank=0, tid=tid, name=kind, kind=kind, start_us=start, end_us=end, step=0)


def test_summary_of_a_hand_made_step():
    """backward 0–10 ms, all-reduces 6–12 and 8–16 ms (two gloo threads), optimizer 16–18."""
    spans = [_span("step", 0, 20_000), _span("backward", 0, 10_000),
             _span("allreduce", 6_000, 12_000, "gloo1"), _span("allreduce", 8_000, 16_000, "gloo2"),
             _span("optimizer", 16_000, 18_000)]
    s = summarize_step(spans, rank=0, step=0)
    assert s.step_ms == 20 and s.backward_ms == 10
    assert s.comm_ms == 10          # 6–16 ms, counted once where the threads overlap
    assert s.overlapped_ms == 4     # 6–10 ms
    assert s.exposed_comm_ms == 6   # 10–16 ms: nothing computes
    assert s.overlap_fraction == 0.4
    assert s.n_allreduces == 2

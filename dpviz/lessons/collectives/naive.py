"""Naive all-reduce, the parameter-server pattern: everyone sends to rank 0, rank 0 sums
and sends the result back to everyone.

Two steps only, but rank 0 receives (N−1)·S bytes and then sends (N−1)·S: its link carries
traffic that grows with N while the other links idle (seed 003: "parameter server vs ring").
"""
from __future__ import annotations

from dpviz.lessons.collectives.schedule import Schedule, make_steps


def naive_schedule(world_size: int, elements: int) -> Schedule:
    n = world_size
    phases = [("reduce", [(r, 0, 0, "add") for r in range(1, n)]),
              ("broadcast", [(0, r, 0, "copy") for r in range(1, n)])]
    chunks = ((0, elements),)
    return Schedule("naive", n, elements, chunks, make_steps(phases, n, chunks))

"""Ring all-reduce, two ways: chunked (reduce-scatter + all-gather) and PyTorch's tutorial.

Chunked ring (what NCCL and gloo do for large messages): the buffer is cut into N chunks.
  reduce-scatter, N−1 steps: at step s rank r sends chunk (r − s) mod N to rank r+1, which
  adds it to its own copy. Afterwards rank r holds the full sum of chunk (r + 1) mod N.
  all-gather, N−1 steps: at step s rank r sends chunk (r + 1 − s) mod N, the receiver
  overwrites. Every rank sends 2(N−1) chunks of S/N bytes: 2(N−1)/N · S, nearly 2S
  whatever N is.

Unchunked ring (the "Writing Distributed Applications" tutorial): every step each rank
passes its neighbour a WHOLE buffer of raw inputs (its own first, then what it received
last) and adds what arrives. N−1 steps of S bytes: (N−1) · S per rank, growing with N.
"""
from __future__ import annotations

from dpviz.lessons.collectives.schedule import Schedule, chunk_bounds, make_steps


def ring_schedule(world_size: int, elements: int) -> Schedule:
    """Reduce-scatter then all-gather around the ring 0 → 1 → … → N−1 → 0."""
    n = world_size
    right = [(r + 1) % n for r in range(n)]
    phases = [("reduce_scatter", [(r, right[r], (r - s) % n, "add") for r in range(n)])
              for s in range(n - 1)]
    phases += [("all_gather", [(r, right[r], (r + 1 - s) % n, "copy") for r in range(n)])
               for s in range(n - 1)]
    chunks = chunk_bounds(elements, n)
    return Schedule("ring", n, elements, chunks, make_steps(phases, n, chunks))


def unchunked_ring_schedule(world_size: int, elements: int) -> Schedule:
    """N−1 steps; at step s > 0 a rank forwards the raw buffer it received at step s−1."""
    n = world_size
    phases = [("reduce", [(r, (r + 1) % n, 0, "add", s > 0) for r in range(n)]) for s in range(n - 1)]
    chunks = ((0, elements),)
    return Schedule("ring-unchunked", n, elements, chunks, make_steps(phases, n, chunks))

"""Tree all-reduce: reduce up a binomial tree to rank 0, broadcast back down.

At up-step k (k = 0, 1, …) every rank r with r mod 2^(k+1) = 2^k sends its partial sum to
r − 2^k: the number of senders halves each step, so after ⌈log2 N⌉ steps rank 0 holds the
sum. The broadcast replays the tree in reverse: 2·⌈log2 N⌉ steps in all, against the ring's
2(N−1) — fewer latency hops, but each hop moves the whole buffer S, in every step only some
ranks send, and the root sends ⌈log2 N⌉·S. This is the textbook binomial tree, not the tree of
seed 000 §5.2: NCCL's tree all-reduce runs a pipelined double binary tree (two complementary
binary trees, each reducing and broadcasting half the buffer in small chunks that stream up and
down at once), which keeps each rank's traffic a small constant multiple of S whatever N.
"""
from __future__ import annotations

import math

from dpviz.lessons.collectives.schedule import Schedule, make_steps


def tree_levels(world_size: int) -> int:
    """⌈log2 N⌉: steps in each direction."""
    return math.ceil(math.log2(world_size)) if world_size > 1 else 0


def tree_schedule(world_size: int, elements: int) -> Schedule:
    n, levels = world_size, tree_levels(world_size)
    up = [("reduce", [(r, r - 2 ** k, 0, "add") for r in range(n) if r % 2 ** (k + 1) == 2 ** k])
          for k in range(levels)]
    down = [("broadcast", [(r, r + 2 ** k, 0, "copy") for r in range(0, n, 2 ** (k + 1)) if r + 2 ** k < n])
            for k in reversed(range(levels))]
    chunks = ((0, elements),)
    return Schedule("tree", n, elements, chunks, make_steps(up + down, n, chunks))

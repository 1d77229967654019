"""DDP's bucket layout as arithmetic: the byte limits it packs gradients with, and the greedy
packing itself (`assign_buckets`, a model of torch's own assignment, which
`dpviz.engine.torch_gate.bucket_assignment` calls where this torch offers it; tests check the
two agree). Torch-free, so the engine, the lessons and a saved record all use the same."""
from __future__ import annotations

from typing import Sequence

MIB = 1 << 20
DEFAULT_CAP_MB = 25              # DDP's bucket_cap_mb when left unset
FIRST_BUCKET_BYTES = 1 << 20     # dist._DEFAULT_FIRST_BUCKET_BYTES (a test checks it)
ONE_BUCKET_CAP_MB = 4096.0       # a cap no demo model fills: every gradient in one bucket


def cap_limits(bucket_cap_mb: float | None) -> list[int]:
    """Byte limits DDP rebuilds with: first bucket's, then every later one's (torch 2.13)."""
    if bucket_cap_mb is None:
        return [FIRST_BUCKET_BYTES, DEFAULT_CAP_MB * MIB]
    return [int(bucket_cap_mb * MIB)]


def assign_buckets(sizes: Sequence[int], limits: Sequence[int]) -> list[list[int]]:
    """Greedy packing, as DDP does it: positions into `sizes` (bytes, ready order) per bucket.

    A bucket closes once it holds at least its limit (so one large gradient can overshoot
    it); limit k applies to bucket k, and the last limit to every bucket after.
    """
    if not limits or min(limits) < 1:
        raise ValueError(f"bucket limits must be positive byte counts, got {list(limits)}")
    buckets, current, filled = [], [], 0
    for position, size in enumerate(sizes):
        current.append(position)
        filled += size
        if filled >= limits[min(len(buckets), len(limits) - 1)]:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets

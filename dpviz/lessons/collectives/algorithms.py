"""The all-reduce algorithms dpviz runs, by name, and the checks every request passes
before anything spawns."""
from __future__ import annotations

from dpviz.lessons.collectives.naive import naive_schedule
from dpviz.lessons.collectives.ring import ring_schedule, unchunked_ring_schedule
from dpviz.lessons.collectives.schedule import Schedule
from dpviz.lessons.collectives.tree import tree_schedule

ALGORITHMS = {
    "ring": ring_schedule,
    "tree": tree_schedule,
    "naive": naive_schedule,
    "ring-unchunked": unchunked_ring_schedule,
}


def build(algorithm: str, world_size: int, elements: int) -> Schedule:
    """The schedule of `algorithm` on `world_size` ranks for a buffer of `elements` floats."""
    check(algorithm, world_size, elements)
    return ALGORITHMS[algorithm](world_size, elements)


def check(algorithm: str, world_size: int, elements: int) -> None:
    """Reject a request that cannot run, saying how to fix it."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    for name, value in (("ranks", world_size), ("elements", elements)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be a whole number, got {value!r}")
    if world_size < 2:
        raise ValueError(f"an all-reduce ({algorithm}) needs at least 2 ranks to pass messages, "
                         f"got {world_size}: use --ranks 2 or more")
    if elements < 1:
        raise ValueError(f"elements must be >= 1, got {elements}")
    if algorithm == "ring" and elements < world_size:
        raise ValueError(f"the ring cuts the buffer into one chunk per rank: give at least "
                         f"{world_size} elements for {world_size} ranks, got {elements}")

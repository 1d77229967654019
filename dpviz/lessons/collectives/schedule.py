"""An all-reduce algorithm as a schedule of point-to-point messages, and its numpy model.

Every algorithm dpviz draws (ring, unchunked ring, tree, naive) is written as a list of
steps; each step lists who sends which chunk to whom and whether the receiver adds it or
copies it. Live ranks execute a schedule with send/recv (`dpviz.lessons.collectives.execute`);
`simulate` executes the same schedule on a (ranks, elements) numpy array. Because both add
float32 in the same order, a live run and the model agree bit for bit.

Which ranks' inputs each chunk already sums ("holds") follows from the messages alone:
an "add" unions the payload's ranks into the receiver's chunk, a "copy" replaces them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from dpviz.lessons.collectives.record import CollectiveRecord, ITEMSIZE, Step, Transfer

# (src, dst, chunk, op) or (src, dst, chunk, op, forward): what an algorithm module yields
Message = tuple
Holds = list[list[frozenset]]  # rank → chunk → ranks whose inputs it sums


@dataclass(frozen=True)
class Schedule:
    """What an algorithm will do, before any rank runs it."""

    algorithm: str
    world_size: int
    elements: int
    chunks: tuple[tuple[int, int], ...]
    steps: tuple[Step, ...]

    @property
    def bytes_sent_per_rank(self) -> tuple[int, ...]:
        return bytes_sent(self.steps, self.world_size)


def chunk_bounds(elements: int, parts: int) -> tuple[tuple[int, int], ...]:
    """Split `elements` into `parts` contiguous chunks, the first `elements % parts` one longer
    (numpy.array_split's rule), as [start, stop) ranges."""
    base, extra = divmod(elements, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (i < extra)
        bounds.append((start, stop))
        start = stop
    return tuple(bounds)


def make_steps(phases: Iterable[tuple[str, Sequence[Message]]], world_size: int,
               chunks: tuple[tuple[int, int], ...]) -> tuple[Step, ...]:
    """Turn an algorithm's raw messages into Steps, filling in `carries` and `nbytes`."""
    holds = initial_holds(world_size, len(chunks))
    last_received: dict[int, tuple[int, ...]] = {}  # rank → what its last message carried
    steps = []
    for index, (phase, messages) in enumerate(phases):
        transfers = []
        for src, dst, chunk, op, *rest in messages:
            forward = bool(rest and rest[0])
            if forward and src not in last_received:
                raise ValueError(f"step {index}: rank {src} forwards before it received anything")
            carries = last_received[src] if forward else tuple(sorted(holds[src][chunk]))
            start, stop = chunks[chunk]
            transfers.append(Transfer(src, dst, chunk, op, carries, (stop - start) * ITEMSIZE, forward))
        holds = apply_holds(holds, transfers)
        last_received.update({t.dst: t.carries for t in transfers})
        steps.append(Step(index, phase, tuple(transfers)))
    return tuple(steps)


def initial_holds(world_size: int, n_chunks: int) -> Holds:
    return [[frozenset([rank])] * n_chunks for rank in range(world_size)]


def apply_holds(holds: Holds, transfers: Sequence[Transfer]) -> Holds:
    """The holds after one step: all payloads are taken from the state before it."""
    after = [list(rank) for rank in holds]
    for t in transfers:
        if t.op == "add":
            overlap = after[t.dst][t.chunk] & set(t.carries)
            if overlap:  # a correct all-reduce never counts a rank's input twice
                raise ValueError(f"rank {t.dst} would add rank(s) {sorted(overlap)} twice into chunk {t.chunk}")
            after[t.dst][t.chunk] = after[t.dst][t.chunk] | set(t.carries)
        elif t.op == "copy":
            after[t.dst][t.chunk] = frozenset(t.carries)
        else:
            raise ValueError(f"unknown op {t.op!r}: a transfer either adds or copies")
    return after


def holds_per_step(record: CollectiveRecord) -> list[Holds]:
    """Holds before step 0, then after each step (len = steps + 1), for colouring chunks."""
    states = [initial_holds(record.world_size, len(record.chunks))]
    for step in record.steps:
        states.append(apply_holds(states[-1], step.transfers))
    return states


def bytes_sent(steps: Sequence[Step], world_size: int) -> tuple[int, ...]:
    """What each rank sends over the whole schedule, in bytes."""
    sent = [0] * world_size
    for step in steps:
        for t in step.transfers:
            sent[t.src] += t.nbytes
    return tuple(sent)


def split(buffer: np.ndarray, chunks: tuple[tuple[int, int], ...]) -> tuple[tuple[float, ...], ...]:
    """One rank's flat buffer → chunk → values (plain floats for the record)."""
    return tuple(tuple(float(v) for v in buffer[start:stop]) for start, stop in chunks)


def simulate(schedule: Schedule, inputs: np.ndarray) -> CollectiveRecord:
    """The numpy model: run the schedule on all ranks at once, (ranks, elements) float32."""
    chunks = schedule.chunks
    state = np.array(inputs, dtype=np.float32)
    if state.shape != (schedule.world_size, schedule.elements):
        raise ValueError(f"inputs must have shape ({schedule.world_size}, {schedule.elements}), "
                         f"got {state.shape}")
    received: dict[int, np.ndarray] = {}
    recorded = []
    for step in schedule.steps:
        payloads = [received[t.src] if t.forward else state[t.src, slice(*chunks[t.chunk])].copy()
                    for t in step.transfers]  # everything sent is read before anything lands
        for t, payload in zip(step.transfers, payloads):
            view = state[t.dst, slice(*chunks[t.chunk])]
            if t.op == "add":
                view += payload
            else:
                view[:] = payload
            received[t.dst] = payload
        recorded.append(Step(step.index, step.phase, step.transfers,
                             tuple(split(row, chunks) for row in state)))
    return CollectiveRecord(
        algorithm=schedule.algorithm, world_size=schedule.world_size, elements=schedule.elements,
        chunks=chunks, inputs=tuple(tuple(float(v) for v in row) for row in np.float32(inputs)),
        steps=tuple(recorded), bytes_sent_per_rank=schedule.bytes_sent_per_rank, source="model")

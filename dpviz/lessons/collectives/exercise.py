"""Exercise 1: write a ring all-reduce from point-to-point messages.

    def ring_all_reduce(buf, comm) -> None:
        '''Sum `buf` (1-D float32) over all ranks, in place, by messages around the ring.'''

`comm.rank`, `comm.world_size`; `comm.isend(tensor, dst)` returns a request to `.wait()`;
`comm.recv(tensor, src)` blocks until the tensor arrived. How you are counted:
- each `comm.isend` adds its tensor's bytes to what your rank sent;
- each `comm.recv` ends one step (in a ring, every rank receives one message per step).
A chunked ring takes 2(N−1) steps and sends 2(N−1)/N · S bytes per rank (S: the buffer).

Checked on live ranks, in this order: the result against `dist.all_reduce`, then steps
and bytes per rank. The reference for the figure is dpviz's ring schedule (its numpy
model equals live ranks bit for bit, tests/test_ring.py).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.exercises.core import Comm, check_attempt, resolve, run_attempt
from dpviz.lessons.collectives.record import RingCheck, RingRun, RingSend
from dpviz.lessons.exercises.records import Verdict

EXERCISE = "ring all-reduce"
NAME = "ring_all_reduce"
EXERCISE_FACADE = ("check_ring",)  # what `dpviz.lessons.exercises.<name>` offers from here
BASE = 8   # provenance: rank r holds BASE**r, so each base-8 digit of a sum counts one rank's input


def contributors(value: float, world_size: int) -> tuple[int, ...]:
    """Ranks whose inputs a provenance value sums, a rank repeated if added twice (exact
    up to 7 copies of each input; more carry into the next rank's digit); () when the value
    is no such sum (negative, too large, or not a whole number)."""
    if value != int(value) or not 0 <= value < BASE ** world_size:
        return ()
    digits, v = [], int(value)
    for rank in range(world_size):
        digits += [rank] * (v % BASE)
        v //= BASE
    return tuple(digits)


# --- rank side ----------------------------------------------------------------------------

def _attempt(fn, buf, ctx: RankContext):
    """Run `fn` on `buf` through a recording Comm; (comm, frames: state before each recv + final)."""
    frames: list[list[float]] = []
    comm = Comm(ctx.rank, ctx.world_size, on_recv=lambda: frames.append(buf.tolist()))
    fn(buf, comm)
    frames.append(buf.tolist())
    return comm, frames


def ring_rank(ctx: RankContext, spec: tuple, inputs: list[list[float]]) -> dict:
    """Rank task: the learner's ring on demo values, then on provenance values."""
    import torch
    import torch.distributed as dist

    fn = resolve(spec)
    buf = torch.tensor(inputs[ctx.rank], dtype=torch.float32)
    expected = buf.clone()
    dist.all_reduce(expected)
    base_ptr = buf.data_ptr()
    comm, frames = _attempt(fn, buf, ctx)
    marks = torch.full_like(buf, float(BASE ** ctx.rank))
    _, mark_frames = _attempt(fn, marks, ctx)
    sends, step = [], 0
    for call in comm.calls:
        if call["op"] == "recv":
            step += 1
        elif call["op"] == "send":
            offset = (call["ptr"] - base_ptr) // 4
            inside = 0 <= offset and offset + call["numel"] <= buf.numel()
            sends.append(dict(step=step, src=ctx.rank, dst=call["peer"], nbytes=call["nbytes"],
                              start=offset if inside else None,
                              stop=offset + call["numel"] if inside else None))
    return dict(frames=frames, mark_frames=mark_frames, sends=sends, steps=comm.count("recv"),
                sent=comm.sent_bytes(), result=buf.tolist(), expected=expected.tolist())


# --- parent side --------------------------------------------------------------------------

def reference_run(world_size: int, inputs: np.ndarray) -> RingRun:
    """dpviz's ring on the same inputs (numpy model), as frames like a live attempt's."""
    from dpviz.lessons.collectives.ring import ring_schedule
    from dpviz.lessons.collectives.schedule import holds_per_step, simulate

    record = simulate(ring_schedule(world_size, inputs.shape[1]), inputs)
    frames = [record.inputs] + [tuple(tuple(v for c in rank for v in c) for rank in s.values)
                                for s in record.steps]
    sizes = [b - a for a, b in record.chunks]
    holds = [tuple(tuple(tuple(sorted(h)) for h, size in zip(rank, sizes) for _ in range(size))
                   for rank in state) for state in holds_per_step(record)]
    sends = tuple(RingSend(s.index, t.src, t.dst, t.nbytes, *record.chunks[t.chunk])
                  for s in record.steps for t in s.transfers)
    return RingRun("model", world_size, inputs.shape[1], record.chunks, tuple(frames), tuple(holds),
                   sends, (len(record.steps),) * world_size, record.bytes_sent_per_rank)


def _padded(per_rank: list[list], length: int) -> tuple:
    """frame → rank, repeating a rank's last frame if it took fewer steps."""
    return tuple(tuple(tuple(rank[min(k, len(rank) - 1)]) for rank in per_rank) for k in range(length))


def live_run(results: list[dict], reference: RingRun) -> RingRun:
    n = reference.world_size
    length = max(len(r["frames"]) for r in results)
    marks = [[[contributors(v, n) for v in frame] for frame in r["mark_frames"]] for r in results]
    return RingRun("live", n, reference.elements, reference.chunks,
                   _padded([r["frames"] for r in results], length), _padded(marks, length),
                   tuple(RingSend(**s) for r in results for s in r["sends"]),
                   tuple(r["steps"] for r in results), tuple(r["sent"] for r in results))


def first_difference(yours: RingRun, reference: RingRun) -> int:
    """The first frame whose values differ (the last common frame if none do)."""
    for k in range(max(len(yours.frames), len(reference.frames))):
        mine = yours.frames[min(k, len(yours.frames) - 1)]
        ref = reference.frames[min(k, len(reference.frames) - 1)]
        if mine != ref:
            return k
    return len(yours.frames) - 1


def judge(yours: RingRun, results: list[dict], checked: str) -> Verdict:
    """The first thing wrong, in the order a learner can fix them."""
    n, s = yours.world_size, yours.elements * 4
    for rank, r in enumerate(results):
        if r["result"] != r["expected"]:
            i = next(i for i, (a, b) in enumerate(zip(r["result"], r["expected"])) if a != b)
            return Verdict(EXERCISE, False, checked, "wrong_sum",
                           f"wrong result: rank {rank} element {i} is {r['result'][i]:g}, the sum "
                           f"over ranks is {r['expected'][i]:g}",
                           "the figure shows the first step where your buffers leave the reference's: "
                           "in reduce-scatter add what arrives, in all-gather overwrite with it")
    sent, steps = yours.bytes_sent_per_rank, yours.steps_per_rank
    if not any(sent):
        return Verdict(EXERCISE, False, checked, "no_messages",
                       "right sum, but nothing went through comm.isend: the steps and bytes "
                       "cannot be checked (dist.all_reduce or dist.send are not counted)",
                       "send with comm.isend and receive with comm.recv")
    if all(b == (n - 1) * s for b in sent) and all(k == n - 1 for k in steps):
        return Verdict(EXERCISE, False, checked, "unchunked_ring",
                       f"right sum, but every rank sent its whole buffer in each of {n - 1} steps: "
                       f"(N−1)·S = {(n - 1) * s} B per rank — the PyTorch tutorial's unchunked ring. "
                       f"A chunked ring sends 2(N−1)/N·S = {2 * (n - 1) * s // n} B, whatever N is.",
                       "cut buf into N chunks (torch.tensor_split gives views); reduce-scatter in N−1 "
                       "steps, then all-gather in N−1 steps, one chunk per message")
    if any(k != 2 * (n - 1) for k in steps):
        return Verdict(EXERCISE, False, checked, "steps",
                       f"right sum, but ranks took {list(steps)} steps; a ring takes 2(N−1) = {2 * (n - 1)}",
                       "one recv per step: N−1 steps of reduce-scatter, N−1 of all-gather")
    if any(b != 2 * (n - 1) * s // n for b in sent):
        return Verdict(EXERCISE, False, checked, "bytes",
                       f"right sum and steps, but ranks sent {list(sent)} B; a ring sends "
                       f"2(N−1)/N·S = {2 * (n - 1) * s // n} B each",
                       "send one chunk (S/N bytes) per step, not more")
    return Verdict(EXERCISE, True, checked,
                   message=f"sum right on {n} ranks in {2 * (n - 1)} steps, {2 * (n - 1) * s // n} B "
                           f"sent per rank (2(N−1)/N·S)")


def check_ring_size(n: int) -> int:
    """The ring needs 2 or more ranks, and fewer than BASE (see the module docstring)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n < BASE:
        raise ValueError(f"the ring exercise needs 2 to {BASE - 1} ranks, got {n!r}")
    return n


def check_ring(fn: Callable | None = None, *, cluster: Cluster | None = None,
               world_size: int = 4) -> RingCheck:
    """Run `fn(buf, comm)` on live ranks and check it (see the module docstring).

    Pass a warm `cluster` (its size is N), or a `world_size` to start one for this call.
    """
    check_ring_size(cluster.world_size if cluster is not None else world_size)
    check_attempt(fn, NAME)
    with using_cluster(cluster, world_size) as ranks:
        return _check_ring_on(ranks, fn)


def _check_ring_on(cluster: Cluster, fn: Callable | None) -> RingCheck:
    n = check_ring_size(cluster.world_size)
    rng = np.random.default_rng(0)
    inputs = rng.integers(0, 10, size=(n, 3 * n)).astype(np.float32)  # S divisible by N; exact sums
    reference = reference_run(n, inputs)
    results, early, checked = run_attempt(cluster, ring_rank, fn, EXERCISE, NAME, inputs.tolist())
    if early is not None:
        return RingCheck(early, reference)
    yours = live_run(results, reference)
    verdict = judge(yours, results, checked)
    return RingCheck(verdict, reference, yours, None if verdict.passed else first_difference(yours, reference))

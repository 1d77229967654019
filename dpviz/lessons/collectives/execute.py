"""Run an all-reduce schedule on live ranks with point-to-point send/recv, and record it.

Rank side: `run_steps` posts this rank's sends (`dist.isend`) for a step, receives what is
addressed to it (`dist.recv`), waits for its sends, then adds or copies what arrived — so,
as in the numpy model, every payload is the sender's state *before* the step. The result is
checked against `dist.all_reduce` on the same inputs.

Parent side: `record_collective` validates, runs the ranks and returns a CollectiveRecord;
`model.model_collective` is the same algorithm in numpy, for the test that they agree.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from dpviz.core.config import validate_world_size, writable_dir
from dpviz.core.record import save
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.collectives.algorithms import build, check
from dpviz.lessons.collectives.model import demo_inputs
from dpviz.lessons.collectives.record import CollectiveRecord, Step
from dpviz.lessons.collectives.schedule import Schedule, split

FACADE = ("record_collective",)  # what `dpviz.<name>` offers from here

MAX_RECORDED_ELEMENTS = 4096  # values are stored for every rank and step: keep records small
F32_EPS = float(np.finfo(np.float32).eps)


# --- rank side ----------------------------------------------------------------------------

def run_steps(schedule: Schedule, buf, rank: int, record: bool = False,
              clock: dict[str, float] | None = None):
    """Execute `schedule` on this rank's float32 `buf` in place.

    Returns (bytes this rank sent, per-step chunk values if `record` else []). With `clock`,
    adds the seconds spent moving data ("transfer") and adding or copying it ("reduce"):
    the profile that says where a slower-than-gloo ring loses its time.
    """
    import torch
    import torch.distributed as dist

    sent, values, received = 0, [], None
    for step in schedule.steps:
        t0 = time.perf_counter()
        outgoing = [t for t in step.transfers if t.src == rank]
        incoming = [t for t in step.transfers if t.dst == rank]
        requests = []
        for t in outgoing:
            payload = received if t.forward else buf[slice(*schedule.chunks[t.chunk])]
            requests.append(dist.isend(payload, t.dst))
            sent += payload.numel() * payload.element_size()
        arrived = []
        for t in incoming:  # in schedule order: the same order of adds as the model
            start, stop = schedule.chunks[t.chunk]
            tmp = torch.empty(stop - start, dtype=buf.dtype)
            dist.recv(tmp, t.src)
            arrived.append((t, tmp))
        for request in requests:
            request.wait()  # our chunks may now change: the sends have left
        t1 = time.perf_counter()
        for t, tmp in arrived:
            view = buf[slice(*schedule.chunks[t.chunk])]
            if t.op == "add":
                view.add_(tmp)
            else:
                view.copy_(tmp)
            received = tmp
        if clock is not None:
            clock["transfer"] = clock.get("transfer", 0.0) + t1 - t0
            clock["reduce"] = clock.get("reduce", 0.0) + time.perf_counter() - t1
        if record:
            values.append(split(buf.numpy(), schedule.chunks))
    return sent, values


def compare_with_all_reduce(result, original, world_size: int) -> tuple[float, bool]:
    """(max |result − dist.all_reduce(original)|, within float32 rounding of a reordered sum).

    Two correct sums of N float32 values differ by at most about N·eps·Σ|x|, so that is
    the tolerance; with integer-valued inputs the difference is exactly 0.
    """
    import torch.distributed as dist

    reference, scale = original.clone(), original.abs()
    dist.all_reduce(reference)
    dist.all_reduce(scale)
    diff = (result - reference).abs()
    return float(diff.max()), bool((diff <= world_size * F32_EPS * scale).all())


def record_rank(ctx: RankContext, schedule: Schedule, inputs: list[list[float]]) -> dict:
    """Run the schedule on this rank's row of `inputs`, recording every step."""
    import torch

    buf = torch.tensor(inputs[ctx.rank], dtype=torch.float32)
    original = buf.clone()
    sent, values = run_steps(schedule, buf, ctx.rank, record=True)
    max_diff, matches = compare_with_all_reduce(buf, original, ctx.world_size)
    return dict(sent=sent, values=values, max_diff=max_diff, matches=matches)


# --- parent side --------------------------------------------------------------------------

def record_collective(algorithm: str = "ring", *, cluster: Cluster | None = None, elements: int = 16,
                      world_size: int | None = None, seed: int = 0,
                      out: str | os.PathLike | None = None) -> CollectiveRecord:
    """Run `algorithm` on live ranks on `demo_inputs` and record every step.

    Pass a warm `cluster` (its size is the world size) or `world_size` to start one for this
    call. With `out`, also writes out/ring.json.
    """
    world_size = cluster.world_size if cluster is not None else (4 if world_size is None else world_size)
    check(algorithm, world_size, elements)
    validate_world_size(world_size, cluster.backend if cluster else "gloo", minimum=2)
    if elements > MAX_RECORDED_ELEMENTS:
        raise ValueError(f"a recorded run stores every value of every step: use at most "
                         f"{MAX_RECORDED_ELEMENTS} elements (time larger buffers with `dpviz bench`)")
    out_dir = writable_dir(out) if out is not None else None
    schedule = build(algorithm, world_size, elements)
    inputs = demo_inputs(world_size, elements, seed)
    with using_cluster(cluster, world_size) as ranks:
        results = ranks.run_task(record_rank, schedule, inputs.tolist())
    record = assemble_collective(schedule, inputs, results)
    if out_dir is not None:
        save(record, Path(out_dir) / "ring.json")
    return record


def assemble_collective(schedule: Schedule, inputs: np.ndarray, results: list[dict]) -> CollectiveRecord:
    """Per-rank results → one record: step i's values are every rank's i-th snapshot."""
    steps = tuple(Step(step.index, step.phase, step.transfers,
                       tuple(res["values"][i] for res in results))
                  for i, step in enumerate(schedule.steps))
    return CollectiveRecord(
        algorithm=schedule.algorithm, world_size=schedule.world_size, elements=schedule.elements,
        chunks=schedule.chunks, inputs=tuple(tuple(float(v) for v in row) for row in inputs),
        steps=steps, bytes_sent_per_rank=tuple(res["sent"] for res in results),
        matches_all_reduce=all(res["matches"] for res in results),
        max_abs_diff=max(res["max_diff"] for res in results), source="live")

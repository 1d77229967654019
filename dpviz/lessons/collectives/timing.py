"""Time collectives on live ranks: torch's own (dist.all_reduce, …) and dpviz's schedules.

Every timed call starts right after a barrier; a call's time is the slowest rank's (the
collective is done when the last rank is), and a size's time is the median over repeats
after warm-up calls (the first calls pay for connection set-up and allocation).

With `link=` (a preset name or a `dpviz.core.link.Link`) every all-reduce first crosses the
emulated wire of live runs (`dpviz.engine.link_thread`): a sleep of α + wire_bytes/β, then the
real gloo all-reduce. The α-β fit of such a bench recovers the link's own α and β (plus
the small cost of the real all-reduce after it); without a link it measures raw loopback,
gloo computing on the same CPU cores, which is no wire at all.
"""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Sequence

from dpviz.core.config import validate_world_size, writable_dir
from dpviz.core.link import Link, as_link
from dpviz.core.record import save
from dpviz.engine.launch import Cluster, RankContext
from dpviz.lessons.collectives.algorithms import ALGORITHMS, build
from dpviz.lessons.collectives.bandwidth import BenchRecord, BenchRow, OPS, make_row
from dpviz.lessons.collectives.record import ITEMSIZE

FACADE = ("bench_collectives",)  # what `dpviz.<name>` offers from here

MAX_BYTES = 1 << 30


def op_elements(op: str, nbytes: int, world_size: int) -> int:
    """float32 elements of the op's total size S, rounded down to a multiple of the rank
    count (reduce-scatter, all-gather and the ring split S into one part per rank)."""
    return max(world_size, nbytes // ITEMSIZE // world_size * world_size)


# --- rank side ----------------------------------------------------------------------------

def time_rank(ctx: RankContext, op: str, elements: int, warmup: int, repeats: int,
              schedule=None, link: Link | None = None) -> list[float]:
    """This rank's time (ms) for each timed call of `op` on `elements` float32 in total;
    with `link`, each all-reduce crosses the emulated wire first (its thread sleeps)."""
    import torch
    import torch.distributed as dist

    from dpviz.engine.link_thread import LinkThread
    from dpviz.lessons.collectives.execute import run_steps

    n = ctx.world_size
    gen = torch.Generator().manual_seed(ctx.rank)
    x = torch.randn(elements, generator=gen)
    parts = [torch.empty(elements // n) for _ in range(n)]
    wire = LinkThread(link, n) if link is not None else None

    def call() -> None:
        if wire is not None:
            wire.send(0, x).wait()
        elif op == "all_reduce":
            dist.all_reduce(x)
        elif op == "reduce_scatter":
            dist.reduce_scatter(parts[0], list(x.chunk(n)))
        elif op == "all_gather":
            dist.all_gather(parts, x[: elements // n])
        else:
            run_steps(schedule, x, ctx.rank)

    times = []
    for i in range(warmup + repeats):
        x.mul_(1 / n)  # keep repeated sums in range
        dist.barrier()
        t0 = time.perf_counter()
        call()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    if wire is not None:
        wire.close()
    return times


def ring_phases_rank(ctx: RankContext, elements: int, warmup: int,
                     repeats: int) -> list[dict[str, float]]:
    """The dpviz ring on this rank, split: per timed call, ms of the whole call, of its
    transfers (send/recv/wait) and of its adds, beside `dist.all_reduce` timed alike."""
    import torch
    import torch.distributed as dist

    from dpviz.lessons.collectives.execute import run_steps

    schedule = build("ring", ctx.world_size, elements)
    x = torch.randn(elements, generator=torch.Generator().manual_seed(ctx.rank))
    rows: list[dict[str, float]] = []
    for i in range(warmup + repeats):
        x.mul_(1 / ctx.world_size)  # keep repeated sums in range
        clock: dict[str, float] = {}
        dist.barrier()
        t0 = time.perf_counter()
        run_steps(schedule, x, ctx.rank, clock=clock)
        t1 = time.perf_counter()
        dist.barrier()
        t2 = time.perf_counter()
        dist.all_reduce(x)
        t3 = time.perf_counter()
        if i >= warmup:
            rows.append({k: v * 1e3 for k, v in dict(
                ring=t1 - t0, transfer=clock["transfer"], reduce=clock["reduce"],
                all_reduce=t3 - t2).items()})
    return rows


LOAD_ARMS = ("alone", "pair", "compute", "beside")


def all_reduce_under_load_rank(ctx: RankContext, elements: int, burst: int,
                               repeats: int) -> list[dict[str, float]]:
    """gloo's all-reduce on this rank alone, two in flight at once, and beside a burst of
    compute on the rank's main thread (what backward is to a bucket's all-reduce), each arm
    after a barrier, their order rotated every repeat, after one warm-up of each.

    The what-if model learns a reduction's cost from runs where all-reduces run one at a time
    after backward; with a faster link they run beside backward and beside each other, on the
    same cores. Each row holds when things happened (ms on `time.perf_counter`, one clock for
    every rank of this host), not durations: ranks leave a barrier up to a few ms apart on
    busy cores, so the parent times a collective from when its last rank joined, as the model
    learns it (`dpviz.lessons.what_if.load.load_from_rows`). `pair_first`: the first of the
    two done; `beside_seen`: the all-reduce seen done, polled between the burst's matmuls (when
    the burst ended if it was not done by then); `beside_end`: the burst's end."""
    import torch
    import torch.distributed as dist

    a, b = torch.ones(elements), torch.ones(elements)
    x = torch.randn(128, 128, generator=torch.Generator().manual_seed(ctx.rank)) * 0.01

    def burst_of(n: int, work=None) -> float | None:
        seen = None
        for _ in range(n):
            torch.tanh(x @ x)
            if seen is None and work is not None and work.is_completed():
                seen = time.perf_counter()
        return seen

    rows: list[dict[str, float]] = []
    for i in range(1 + repeats):
        row: dict[str, float] = {}
        for arm in LOAD_ARMS[i % 4:] + LOAD_ARMS[:i % 4]:
            a.mul_(1 / ctx.world_size)   # keep repeated sums in range
            b.mul_(1 / ctx.world_size)
            dist.barrier()
            row[f"{arm}_start"] = time.perf_counter()
            if arm == "alone":
                dist.all_reduce(a)
                row["alone_end"] = time.perf_counter()
            elif arm == "pair":
                first, second = dist.all_reduce(a, async_op=True), dist.all_reduce(b, async_op=True)
                first.wait()
                row["pair_first"] = time.perf_counter()
                second.wait()
                row["pair_end"] = time.perf_counter()
            elif arm == "compute":
                burst_of(burst)
                row["compute_end"] = time.perf_counter()
            else:
                work = dist.all_reduce(a, async_op=True)
                seen = burst_of(burst, work)
                row["beside_end"] = time.perf_counter()
                work.wait()
                row["beside_seen"] = seen or time.perf_counter()
        if i >= 1:
            rows.append({k: v * 1e3 for k, v in row.items()})
    return rows


# --- parent side --------------------------------------------------------------------------

def check_bench(world_sizes: Sequence[int], sizes: Sequence[int], ops: Sequence[str],
                warmup: int, repeats: int, link: Link | None = None) -> None:
    """Every bench request is checked here, before anything spawns."""
    if not world_sizes or not sizes or not ops:
        raise ValueError("give at least one rank count, one size and one op")
    if link is not None and set(ops) != {"all_reduce"}:
        raise ValueError(f"the emulated link carries all_reduce only (as in DDP's runs), got ops {list(ops)}")
    for n in world_sizes:
        validate_world_size(n, minimum=2)
    for op in ops:
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}; choose from {', '.join(OPS)}")
    for size in sizes:
        if not isinstance(size, int) or not ITEMSIZE <= size <= MAX_BYTES:
            raise ValueError(f"sizes must be from {ITEMSIZE} B to {MAX_BYTES >> 20} MB, got {size!r}")
    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")


def bench_collectives(world_sizes: Sequence[int] = (2, 4), sizes: Sequence[int] = (1 << 10, 1 << 20),
                      ops: Sequence[str] = ("all_reduce", "ring"), warmup: int = 2, repeats: int = 5,
                      cluster: Cluster | None = None, progress: bool = True,
                      out: str | os.PathLike | None = None, link: Link | str | None = None) -> BenchRecord:
    """Time every op at every size on every rank count; with `out`, write out/bench.json.

    A warm `cluster` replaces `world_sizes` with its own size (no new ranks start). `link`
    (a preset name such as "classroom", or a Link; None = raw loopback) puts every
    all-reduce on the emulated wire; the record keeps it.
    """
    world_sizes = [cluster.world_size] if cluster is not None else list(world_sizes)
    link = as_link(link)
    check_bench(world_sizes, sizes, ops, warmup, repeats, link)
    out_dir = writable_dir(out) if out is not None else None
    points = [(n, size, op) for n in world_sizes for size in sizes for op in ops]
    bar = _progress(len(points)) if progress else None
    rows: list[BenchRow] = []
    for n in world_sizes:
        if cluster is not None:
            rows += _bench_on(cluster, sizes, ops, warmup, repeats, bar, link)
        else:
            with Cluster(n) as fresh:
                rows += _bench_on(fresh, sizes, ops, warmup, repeats, bar, link)
    if bar is not None:
        bar.close()
    record = BenchRecord(rows=tuple(rows), warmup=warmup, repeats=repeats,
                         cpu_count=os.cpu_count() or 0,
                         notes=(f"gloo on CPU, {os.cpu_count()} cores shared by all ranks",),
                         link=dataclasses.asdict(link) if link is not None else None)
    if out_dir is not None:
        save(record, Path(out_dir) / "bench.json")
    return record


def _progress(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="bench", unit="point")


def _bench_on(cluster: Cluster, sizes, ops, warmup: int, repeats: int, bar,
              link: Link | None = None) -> list[BenchRow]:
    n, rows = cluster.world_size, []
    for size in sizes:
        for op in ops:
            elements = op_elements(op, size, n)
            schedule = build(op, n, elements) if op in ALGORITHMS else None
            if bar is not None:
                bar.set_postfix_str(f"{op} {n} ranks {_human(elements * ITEMSIZE)}")
            per_rank = cluster.run_task(time_rank, op, elements, warmup, repeats, schedule, link)
            slowest = [max(ts) for ts in zip(*per_rank)]
            rows.append(make_row(op, n, elements * ITEMSIZE, slowest))
            if bar is not None:
                bar.update()
    return rows


def _human(nbytes: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"

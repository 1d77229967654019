"""torch.distributed's communication primitives, run on live ranks, before and after.

Each primitive runs twice: once on readable values (rank r holds 10·(r+1) + i), and once on
"provenance" tensors where rank r holds 2^r everywhere. Copies move a rank's 2^r, sums add
distinct powers of two, so the second run's output says, bit by bit, which ranks' inputs
every output element contains — recorded from the real collective, not assumed.
"""
from __future__ import annotations

import time

from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.collectives.record import PrimitiveRun, PrimitivesRecord

FACADE = ("record_primitives",)  # what `dpviz.<name>` offers from here

PRIMITIVES = ("broadcast", "scatter", "gather", "reduce", "all_reduce", "reduce_scatter",
              "all_gather", "barrier")
BARRIER_DELAY_S = 0.05  # rank r works r × 50 ms before it reaches the barrier


def ranks_in(mask: float) -> tuple[int, ...]:
    """2^a + 2^b + … → (a, b, …)."""
    bits = int(mask)
    return tuple(r for r in range(bits.bit_length()) if bits >> r & 1)


# --- rank side ----------------------------------------------------------------------------

def _apply(name: str, make, rank: int, n: int, k: int, root: int):
    """Run one primitive; `make(count)` builds this rank's input. Returns (before, after)
    as tensors, or None where the rank has no tensor in that role."""
    import torch
    import torch.distributed as dist

    def empty() -> torch.Tensor:
        return torch.empty(k, dtype=torch.float64)

    if name in ("broadcast", "all_reduce"):
        x = make(k)
        before = x.clone()
        if name == "broadcast":
            dist.broadcast(x, src=root)
        else:
            dist.all_reduce(x)
        return before, x
    if name == "reduce":
        x = make(k)
        before = x.clone()
        dist.reduce(x, dst=root)
        return before, x if rank == root else None  # non-root buffers are unspecified after it
    if name == "scatter":
        out, parts = empty(), list(make(n * k).chunk(n)) if rank == root else None
        dist.scatter(out, scatter_list=parts, src=root)
        return (torch.cat(parts) if parts else None), out
    if name == "gather":
        x, parts = make(k), [empty() for _ in range(n)] if rank == root else None
        dist.gather(x, gather_list=parts, dst=root)
        return x, (torch.cat(parts) if parts else None)
    if name == "reduce_scatter":
        x, out = make(n * k), empty()
        dist.reduce_scatter(out, list(x.chunk(n)))
        return x, out
    if name == "all_gather":
        x, parts = make(k), [empty() for _ in range(n)]
        dist.all_gather(parts, x)
        return x, torch.cat(parts)
    raise ValueError(f"unknown primitive {name!r}; choose one of {', '.join(PRIMITIVES)}")


def _barrier_times(rank: int) -> tuple[float, float]:
    """(arrive, leave) in ms since a common start, with rank r arriving r·50 ms late."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    start = torch.tensor([time.time()], dtype=torch.float64)
    dist.broadcast(start, src=0)  # one machine, one clock: rank 0's start is everyone's
    time.sleep(rank * BARRIER_DELAY_S)
    arrive = time.time()
    dist.barrier()
    leave = time.time()
    return (arrive - start.item()) * 1e3, (leave - start.item()) * 1e3


def primitives_rank(ctx: RankContext, elements: int, root: int) -> dict:
    """Every primitive on this rank: values, provenance masks, barrier times."""
    import torch

    rank, n = ctx.rank, ctx.world_size

    def values(count: int) -> torch.Tensor:
        return 10.0 * (rank + 1) + torch.arange(count, dtype=torch.float64)

    def mask(count: int) -> torch.Tensor:
        return torch.full((count,), float(2 ** rank), dtype=torch.float64)

    def as_list(t) -> list[float]:
        return [] if t is None else t.tolist()

    out = {}
    for name in PRIMITIVES[:-1]:
        before, after = _apply(name, values, rank, n, elements, root)
        before_mask, after_mask = _apply(name, mask, rank, n, elements, root)
        out[name] = dict(before=as_list(before), after=as_list(after),
                         before_mask=as_list(before_mask), after_mask=as_list(after_mask))
    out["barrier"] = _barrier_times(rank)
    return out


# --- parent side --------------------------------------------------------------------------

def record_primitives(*, cluster: Cluster | None = None, elements: int = 4, root: int = 0,
                      world_size: int = 4) -> PrimitivesRecord:
    """Run every primitive once on live ranks (a warm `cluster`, or `world_size` fresh ones)."""
    n = cluster.world_size if cluster is not None else world_size
    if isinstance(elements, bool) or not isinstance(elements, int) or not 1 <= elements <= 64:
        raise ValueError(f"elements per rank must be a whole number from 1 to 64 (one grid row "
                         f"per rank), got {elements!r}")
    if not isinstance(root, int) or not 0 <= root < n:
        raise ValueError(f"root must be a rank between 0 and {n - 1}, got {root!r}")
    with using_cluster(cluster, world_size) as ranks:
        results = ranks.run_task(primitives_rank, elements, root)
    runs = []
    for name in PRIMITIVES[:-1]:
        per_rank = [res[name] for res in results]
        runs.append(PrimitiveRun(
            name=name, root=None if name.startswith("all_") or name == "reduce_scatter" else root,
            before=tuple(tuple(r["before"]) for r in per_rank),
            after=tuple(tuple(r["after"]) for r in per_rank),
            before_from=tuple(tuple(map(ranks_in, r["before_mask"])) for r in per_rank),
            after_from=tuple(tuple(map(ranks_in, r["after_mask"])) for r in per_rank)))
    arrive, leave = zip(*(res["barrier"] for res in results))
    empty = tuple(() for _ in range(n))
    runs.append(PrimitiveRun("barrier", None, empty, empty, empty, empty, arrive, leave))
    return PrimitivesRecord(world_size=n, elements=elements, runs=tuple(runs))

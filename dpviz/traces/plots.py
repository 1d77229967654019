"""A step's collectives as the trace shows them: one bar per collective, its size and time.

DDP's all-reduces are its buckets; every other collective (broadcast, all-gather,
reduce-scatter, all-to-all, send/recv, ...) is drawn too, labelled by its op. Read from
the communication spans, not from the comm hook, so it draws a loaded trace of any job
(NCCL kernels carry `In msg nelems` × dtype; gloo annotations carry `Input Dims` when the
profiler ran with `record_shapes=True`) as well as a live run.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..record import RunRecord
from ..overlap import record_ranks, steady_steps
from ..trace import COMM_KINDS
from ..plots import style


@dataclass(frozen=True)
class AllReduceSize:
    """One collective (a bucket's all-reduce, or another op) in one step of one rank."""

    op: str | None         # all_reduce, broadcast, all_gather, ... (trace.COMM_OPS)
    bucket: int | None
    bytes: int | None      # None when the trace did not record the message size
    start_ms: float        # from the step's start
    ms: float              # how long it ran (kernel or gloo thread)


def allreduce_sizes(record: RunRecord, step: int | None = None, rank: int | None = None
                    ) -> list[AllReduceSize]:
    """The collectives of one step of one rank, in launch order (default: last steady step,
    first rank)."""
    step = steady_steps(record)[-1] if step is None else step
    rank = record_ranks(record)[0] if rank is None else rank
    window = record.spans_of(rank=rank, kind="step", step=step)
    if not window:
        raise ValueError(f"rank {rank} has no step {step} (steps: {record.steps}, "
                         f"ranks: {record_ranks(record)})")
    t0 = window[0].start_us
    spans = sorted((s for s in record.spans_of(rank=rank, step=step) if s.kind in COMM_KINDS),
                   key=lambda s: s.start_us)
    return [AllReduceSize(op=s.op, bucket=s.bucket, bytes=s.bytes,
                          start_ms=(s.start_us - t0) / 1e3, ms=s.dur_us / 1e3) for s in spans]


def plot_allreduce_sizes(record: RunRecord, step: int | None = None, rank: int | None = None,
                         ax=None):
    """Bars of MiB per collective, labelled with how long each took; DDP's all-reduces
    coloured by bucket, other collectives by op."""
    step = steady_steps(record)[-1] if step is None else step
    rank = record_ranks(record)[0] if rank is None else rank
    rows = allreduce_sizes(record, step, rank)
    ax = style.new_axes(ax, figsize=(7, 3))
    if not rows:
        raise ValueError(f"rank {rank} has no collective in step {step}")
    mb = [(r.bytes or 0) / 2**20 for r in rows]
    x = list(range(len(rows)))
    ax.bar(x, mb, color=[style.bucket_color(r.bucket) if r.bucket is not None else
                         style.op_color(r.op) for r in rows], edgecolor="white")
    for i, r in enumerate(rows):
        size = "size not recorded" if r.bytes is None else f"{mb[i]:.1f} MiB"
        ax.annotate(f"{size}\n{r.ms:.2f} ms", (i, mb[i]), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(x, [f"bucket {r.bucket}" if r.bucket is not None else (r.op or "collective")
                      for r in rows], rotation=30 if len(rows) > 8 else 0)
    ax.set_ylabel("message size (MiB)")
    ax.set_ylim(0, max(mb + [1e-9]) * 1.25)
    style.tidy(ax)
    total = sum(r.bytes or 0 for r in rows) / 2**20
    ops = Counter(r.op or "collective" for r in rows)
    ax.set_title(f"step {step}, rank {rank}: " + ", ".join(f"{n} {op}" for op, n in sorted(ops.items()))
                 + f", {total:.1f} MiB in all (in launch order)", loc="left")
    style.tag(ax, style.source_of(record))
    return ax

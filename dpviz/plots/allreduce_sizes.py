"""DDP's buckets as the trace shows them: one bar per all-reduce of a step, its size and time.

Read from the all-reduce spans, not from the comm hook, so it draws a loaded trace of any
job (NCCL kernels carry `In msg nelems` × dtype; gloo annotations carry `Input Dims` when
the profiler ran with `record_shapes=True`) as well as a live run.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..record import RunRecord
from ..timeline import record_ranks, steady_steps
from . import style


@dataclass(frozen=True)
class AllReduceSize:
    """One bucket's all-reduce in one step of one rank."""

    bucket: int | None
    bytes: int | None      # None when the trace did not record the message size
    start_ms: float        # from the step's start
    ms: float              # how long the all-reduce ran (kernel or gloo thread)


def allreduce_sizes(record: RunRecord, step: int | None = None, rank: int | None = None
                    ) -> list[AllReduceSize]:
    """The all-reduces of one step of one rank, in bucket order (default: last steady step,
    first rank)."""
    step = steady_steps(record)[-1] if step is None else step
    rank = record_ranks(record)[0] if rank is None else rank
    window = record.spans_of(rank=rank, kind="step", step=step)
    if not window:
        raise ValueError(f"rank {rank} has no step {step} (steps: {record.steps}, "
                         f"ranks: {record_ranks(record)})")
    t0 = window[0].start_us
    spans = sorted(record.spans_of(rank=rank, kind="allreduce", step=step), key=lambda s: s.start_us)
    return [AllReduceSize(bucket=s.bucket, bytes=s.bytes, start_ms=(s.start_us - t0) / 1e3,
                          ms=s.dur_us / 1e3) for s in spans]


def plot_allreduce_sizes(record: RunRecord, step: int | None = None, rank: int | None = None,
                         ax=None):
    """Bars of MB per bucket, labelled with how long each all-reduce took."""
    step = steady_steps(record)[-1] if step is None else step
    rank = record_ranks(record)[0] if rank is None else rank
    rows = allreduce_sizes(record, step, rank)
    ax = style.new_axes(ax, figsize=(7, 3))
    if not rows:
        raise ValueError(f"rank {rank} has no all-reduce in step {step}")
    mb = [(r.bytes or 0) / 2**20 for r in rows]
    x = list(range(len(rows)))
    ax.bar(x, mb, color=[style.bucket_color(r.bucket) for r in rows], edgecolor="white")
    for i, r in enumerate(rows):
        size = "size not recorded" if r.bytes is None else f"{mb[i]:.1f} MiB"
        ax.annotate(f"{size}\n{r.ms:.2f} ms", (i, mb[i]), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(x, [f"bucket {r.bucket}" for r in rows])
    ax.set_ylabel("all-reduce size (MiB)")
    ax.set_ylim(0, max(mb + [1e-9]) * 1.25)
    style.tidy(ax)
    total = sum(r.bytes or 0 for r in rows) / 2**20
    ax.set_title(f"step {step}, rank {rank}: {len(rows)} all-reduces, {total:.1f} MiB of gradients "
                 "(in launch order)", loc="left")
    style.tag(ax, style.source_of(record))
    return ax

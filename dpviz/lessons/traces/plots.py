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

from dpviz.analysis.overlap import record_ranks, steady_steps
from dpviz.analysis.scan import COMM_KINDS
from dpviz.core.record import RunRecord
from dpviz.plots import style


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


LABELLED_BARS = 12   # up to this many collectives, each bar is named and labelled


def sizes_unknown(rows: list[AllReduceSize]) -> str | None:
    """The sentence to show instead of the figure when no size was recorded, else None."""
    if any(r.bytes is not None for r in rows):
        return None
    ops = Counter(r.op or "collective" for r in rows)
    return (f"No message size recorded for the {len(rows)} collectives "
            f"({', '.join(f'{n} {op}' for op, n in sorted(ops.items()))}; "
            f"{sum(r.ms for r in rows):.1f} ms in all): the trace has no `In msg nelems` on its "
            "kernels and no shapes on its collective calls (profile with record_shapes=True).")


def plot_allreduce_sizes(record: RunRecord, step: int | None = None, rank: int | None = None,
                         ax=None):
    """Bars of MiB per collective in launch order; DDP's all-reduces coloured by bucket,
    other collectives by op. Up to LABELLED_BARS bars each is named and labelled with its
    size and time; beyond that the bars stand alone and a legend names the ops. Raises
    ValueError when no size was recorded (`sizes_unknown` says it in a sentence instead)."""
    step = steady_steps(record)[-1] if step is None else step
    rank = record_ranks(record)[0] if rank is None else rank
    rows = allreduce_sizes(record, step, rank)
    if not rows:
        raise ValueError(f"rank {rank} has no collective in step {step}")
    if (sentence := sizes_unknown(rows)) is not None:
        raise ValueError(sentence)
    ax = style.new_axes(ax, figsize=(7 if len(rows) <= LABELLED_BARS else 10, 3))
    mb = [(r.bytes or 0) / 2**20 for r in rows]
    x = list(range(len(rows)))
    few = len(rows) <= LABELLED_BARS
    colors = [style.bucket_color(r.bucket) if r.bucket is not None and few else style.op_color(r.op)
              for r in rows]
    ax.bar(x, mb, color=colors, edgecolor="white" if few else "none", width=0.8)
    if few:
        for i, r in enumerate(rows):
            size = "size not recorded" if r.bytes is None else f"{mb[i]:.1f} MiB"
            ax.annotate(f"{size}\n{r.ms:.2f} ms", (i, mb[i]), ha="center", va="bottom", fontsize=8,
                        xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(x, [f"bucket {r.bucket}" if r.bucket is not None else (r.op or "collective")
                          for r in rows], rotation=30 if len(rows) > 6 else 0)
        ax.set_ylim(0, max(mb) * 1.3)
    else:
        from matplotlib.patches import Patch

        ax.set_xlabel("collective, in launch order")
        ops = sorted({r.op for r in rows}, key=str)
        ax.legend(handles=[Patch(color=style.op_color(op), label=op or "collective") for op in ops],
                  fontsize=8, frameon=False, loc="upper right")
    ax.set_ylabel("message size (MiB)")
    style.tidy(ax)
    total = sum(r.bytes or 0 for r in rows) / 2**20
    unknown = sum(r.bytes is None for r in rows)
    ops = Counter(r.op or "collective" for r in rows)
    ax.set_title(f"step {step}, rank {rank}: {len(rows)} collectives, {total:.1f} MiB in all"
                 + (f" ({unknown} not recorded)" if unknown else "") + "\n"
                 + ", ".join(f"{n} {op}" for op, n in sorted(ops.items())), loc="left", fontsize=10)
    style.tag(ax, style.source_of(record))
    return ax

"""The per-rank timeline of one step: compute lane and communication lane per rank."""
from __future__ import annotations

from collections import defaultdict

from matplotlib.patches import Patch

from ..record import RunRecord
from ..timeline import record_ranks, steady_steps, summarize_step
from . import style

LANE_KINDS = {"compute": ("forward", "backward", "recompute", "optimizer", "compute"),
              "comm": ("allreduce",)}


def plot_timeline(record: RunRecord, step: int | None = None, ax=None, ranks=None):
    """One step of every rank on the common clock: compute above, all-reduces below.

    All-reduce bars are coloured by bucket; the title gives the overlap fraction (time the
    all-reduces run while backward computes ÷ all-reduce time), averaged over ranks.
    """
    ranks = record_ranks(record) if ranks is None else list(ranks)
    ax = style.new_axes(ax, figsize=(11, 1.1 + 0.9 * len(ranks)))
    step = steady_steps(record)[-1] if step is None else step
    if step not in record.steps:
        raise ValueError(f"step {step} is not in this record (steps: {record.steps})")
    spans = [s for s in record.spans if s.step == step and s.rank in ranks]
    t0 = min(s.start_us for s in spans if s.kind == "step")
    yticks, ylabels = [], []
    for row, rank in enumerate(ranks):
        base = (len(ranks) - 1 - row) * 3
        for lane, (name, kinds) in enumerate(LANE_KINDS.items()):
            y = base + (1 - lane) * 1.2
            mine = [s for s in spans if s.rank == rank and s.kind in kinds]
            # gloo runs collectives on two worker threads at once: one sub-lane per thread
            tids = sorted({s.tid for s in mine})
            height = 1.0 / max(1, len(tids))
            bars = defaultdict(list)  # one collection per (sub-lane, colour): a GPU step has ~1000 kernels
            for s in mine:
                color = style.bucket_color(s.bucket) if name == "comm" else style.kind_color(s.kind)
                bars[(s.tid, color)].append(((s.start_us - t0) / 1e3, s.dur_us / 1e3))
            for (tid, color), xranges in bars.items():  # white edges would hide thin kernels
                ax.broken_barh(xranges, (y + tids.index(tid) * height, height * 0.92), facecolors=color,
                               edgecolor="white", linewidth=0.3 if len(mine) < 300 else 0)
            yticks.append(y + 0.5)
            ylabels.append(f"rank {rank} {'compute' if name == 'compute' else 'all-reduce'}")
    ax.set_yticks(yticks, ylabels)
    ax.set_xlabel(f"time in step {step} (ms, common clock)")
    style.tidy(ax)
    fractions = [summarize_step(spans, r, step).overlap_fraction for r in ranks]
    ax.set_title(f"step {step}: all-reduce overlaps backward {100 * sum(fractions) / len(fractions):.0f}% "
                 "of its time", loc="left")
    buckets = sorted({s.bucket for s in spans if s.kind == "allreduce" and s.bucket is not None})
    handles = [Patch(color=style.kind_color(k), label=k) for k in ("forward", "backward", "optimizer")]
    handles += [Patch(color=style.bucket_color(b), label=f"bucket {b}") for b in buckets]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    style.tag(ax, style.source_of(record), note=style.adjustment_of(record))
    return ax

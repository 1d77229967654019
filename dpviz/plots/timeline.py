"""The per-rank timeline of one step: compute lane and communication lane per rank."""
from __future__ import annotations

from collections import defaultdict

from matplotlib.patches import Patch

from ..link.records import link_note
from ..record import RunRecord
from ..overlap import COMPUTE_KINDS, record_ranks, steady_steps, summarize_step
from ..trace import COMM_KINDS
from . import style
from .bars import link_bars

# an emulated link's transfers (dpviz.link.records) share the communication lane with the collectives
LANE_KINDS = {"compute": COMPUTE_KINDS, "comm": (*COMM_KINDS, "link")}


def plot_timeline(record: RunRecord, step: int | None = None, ax=None, ranks=None,
                  labels: dict[int, str] | None = None):
    """One step of every rank on the common clock: compute above, collectives below.

    DDP's all-reduces are coloured by bucket, every other collective by its op; the title
    gives both overlap figures (communication under any compute, and under backward),
    averaged over ranks. `labels` names ranks (e.g. "node 1:0") instead of "rank N".
    """
    ranks = record_ranks(record) if ranks is None else list(ranks)
    step = steady_steps(record)[-1] if step is None else step
    if step not in record.steps:
        raise ValueError(f"step {step} is not in this record (steps: {record.steps})")
    spans = [s for s in record.spans if s.step == step and s.rank in ranks]
    comm = [s for s in spans if s.kind in COMM_KINDS]
    buckets = sorted({s.bucket for s in comm if s.kind == "allreduce" and s.bucket is not None})
    ops = sorted({s.op for s in comm if not (s.kind == "allreduce" and s.bucket is not None)},
                 key=str)
    entries = 4 + len(buckets) + len(ops)   # legend rows: tall enough that the legend fits beside it
    ax = style.new_axes(ax, figsize=(11, max(1.1 + 0.9 * len(ranks), 0.7 + 0.2 * entries)))
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
                link = s.kind == "link"
                color = (style.bucket_color(s.bucket) if link else style.comm_color(s) if name == "comm"
                         else style.kind_color(s.kind))
                bars[(s.tid, color, link)].append(((s.start_us - t0) / 1e3, s.dur_us / 1e3))
            for (tid, color, link), xranges in bars.items():  # white edges would hide thin kernels
                sub_lane = (y + tids.index(tid) * height, height * 0.92)
                if link:
                    link_bars(ax, xranges, sub_lane, color, linewidth=0.6)
                else:
                    ax.broken_barh(xranges, sub_lane, facecolors=color, edgecolor="white",
                                   linewidth=0.3 if len(mine) < 300 else 0)
            yticks.append(y + 0.5)
            who = (labels or {}).get(rank, f"rank {rank}")
            ylabels.append(f"{who} {'compute' if name == 'compute' else 'comm'}")
    ax.set_yticks(yticks, ylabels)
    ax.set_xlabel(f"time in step {step} (ms, common clock)")
    style.tidy(ax)
    rows = [summarize_step(spans, r, step) for r in ranks]
    mean = lambda xs: 100 * sum(xs) / len(xs)
    ax.set_title(f"step {step}: communication overlaps compute "
                 f"{mean([r.overlap_fraction for r in rows]):.0f}% of its time, backward "
                 f"{mean([r.backward_overlap_fraction for r in rows]):.0f}%"
                 + (f"\n{note}" if (note := getattr(record, "note", "") or link_note(record.config)) else ""),
                 loc="left")
    handles = [Patch(color=style.kind_color(k), label=k) for k in ("forward", "backward", "optimizer")]
    handles += [Patch(color=style.bucket_color(b), label=f"all-reduce bucket {b}") for b in buckets]
    handles += [Patch(color=style.op_color(op), label=op or "collective") for op in ops]
    if any(s.kind == "link" for s in spans):
        handles.append(Patch(facecolor="white", edgecolor=style.MUTED, hatch=style.LINK_HATCH,
                             label="link transfer (emulated)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    style.tag(ax, style.source_of(record), note=style.adjustment_of(record))
    return ax

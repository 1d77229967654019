"""The per-rank timeline of one step: compute lane and communication lane per rank."""
from __future__ import annotations

from collections import defaultdict

from matplotlib.patches import Patch

from dpviz.analysis.overlap import COMPUTE_KINDS, record_ranks, steady_steps, summarize_step
from dpviz.analysis.scan import COMM_KINDS
from dpviz.core.link import link_note
from dpviz.core.record import RunRecord
from dpviz.plots import style
from dpviz.plots.bars import link_bars, stacked_rows

# an emulated link's transfers (dpviz.core.link) share the communication lane with the collectives
LANE_KINDS = {"compute": COMPUTE_KINDS, "comm": (*COMM_KINDS, "link")}


LEGEND_ENTRIES = 10   # at most this many legend entries; the rest are counted in one
BUCKET_ENTRIES = 6    # more buckets than this share one legend entry (colours cycle)
KIND_LABELS = {"compute": "other compute (kernels or ops outside forward/backward/optimizer)"}


def plot_timeline(record: RunRecord, step: int | None = None, ax=None, ranks=None,
                  labels: dict[int, str] | None = None, name: str | None = None):
    """One step of every rank on the common clock: compute above, collectives below.

    DDP's all-reduces are coloured by bucket, every other collective by its op; the title
    gives both overlap figures (communication under any compute, and under backward),
    averaged over ranks. `labels` names ranks (e.g. "node 1:0") instead of "rank N". A lane
    holding several threads or GPU streams draws one sub-row each (a GPU stream's named on the
    right: a CPU rank's threads, gloo's workers and the link's, would crowd it unread); the
    legend below lists only what is drawn, at most LEGEND_ENTRIES entries. `name` says what the
    step is in its title and time axis (e.g. "recorded step 4"; default "step 4").
    """
    ranks = record_ranks(record) if ranks is None else list(ranks)
    step = steady_steps(record)[-1] if step is None else step
    if step not in record.steps:
        raise ValueError(f"step {step} is not in this record (steps: {record.steps})")
    heading = f"step {step}" if name is None else name
    spans = [s for s in record.spans if s.step == step and s.rank in ranks]
    handles = _legend(spans)
    rows_of_legend = -(-len(handles) // 3)
    own_figure = ax is None
    ax = style.new_axes(ax, figsize=(11, 1.3 + 0.9 * len(ranks) + 0.22 * rows_of_legend))
    t0 = min(s.start_us for s in spans if s.kind == "step")
    yticks, ylabels, sub_ticks, sub_labels = [], [], [], []
    for row, rank in enumerate(ranks):
        base = (len(ranks) - 1 - row) * 3
        for lane, (name, kinds) in enumerate(LANE_KINDS.items()):
            y = base + (1 - lane) * 1.2
            mine = [s for s in spans if s.rank == rank and s.kind in kinds]
            # gloo runs collectives on two worker threads at once, a GPU kernels on several
            # streams: one sub-lane per thread or stream, and per overlapping collective
            # (a bar drawn over another's end would hide where that one ended)
            comm = [s for s in mine if name == "comm" and s.kind != "link"]
            level = dict(zip(map(id, comm), stacked_rows([(s.start_us, s.end_us) for s in comm],
                                                         [s.tid for s in comm])))
            tids = sorted({(s.tid, level.get(id(s), 0)) for s in mine})
            height = 1.0 / max(1, len(tids))
            bars = defaultdict(list)  # one collection per (sub-lane, colour): a GPU step has ~1000 kernels
            for s in mine:
                link = s.kind == "link"
                color = (style.bucket_color(s.bucket) if link else style.comm_color(s) if name == "comm"
                         else style.kind_color(s.kind))
                bars[((s.tid, level.get(id(s), 0)), color, link)].append(((s.start_us - t0) / 1e3,
                                                                           s.dur_us / 1e3))
            for (tid, color, link), xranges in bars.items():  # white edges would hide thin kernels
                sub_lane = (y + tids.index(tid) * height, height * 0.92)
                if link:
                    link_bars(ax, xranges, sub_lane, color, linewidth=0.6)
                else:
                    ax.broken_barh(xranges, sub_lane, facecolors=color, edgecolor="white",
                                   linewidth=0.3 if len(mine) < 300 else 0)
            if len(tids) > 1 and all(tid.startswith("stream") for tid, _ in tids):
                sub_ticks += [y + (i + 0.46) * height for i in range(len(tids))]
                sub_labels += [tid if not lvl else "" for tid, lvl in tids]
            yticks.append(y + 0.5)
            who = (labels or {}).get(rank, f"rank {rank}")
            ylabels.append(f"{who} {'compute' if name == 'compute' else 'comm'}")
    ax.set_yticks(yticks, ylabels)
    if sub_ticks:   # which thread or stream each sub-row is
        right = ax.secondary_yaxis("right")
        right.set_yticks(sub_ticks, sub_labels, fontsize=7)
        right.tick_params(length=0)
        right.spines["right"].set_visible(False)
    ax.set_xlabel(f"time in {heading} (ms, common clock)")
    style.tidy(ax)
    rows = [summarize_step(spans, r, step) for r in ranks]
    mean = lambda xs: 100 * sum(xs) / len(xs)
    with_comm = [r for r in rows if r.comm_ms]
    ax.set_title(f"{heading}: " + (
        f"communication overlaps compute {mean([r.overlap_fraction for r in with_comm]):.0f}% of its "
        f"time, backward {mean([r.backward_overlap_fraction for r in with_comm]):.0f}%"
        if with_comm else "no communication in this step")
        + (f"\n{note}" if (note := getattr(record, "note", "") or link_note(record.config)) else ""), loc="left")
    if handles and own_figure:   # below the axes, in the figure's layout
        ax.figure.legend(handles=handles, loc="outside lower left", ncol=3, fontsize=8, frameon=False)
    elif handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    style.tag(ax, style.source_of(record), note=style.adjustment_of(record))
    return ax


def _legend(spans) -> list[Patch]:
    """Entries for what is drawn only: compute kinds, buckets (one entry when many), ops."""
    drawn = {s.kind for s in spans}
    handles = [Patch(color=style.kind_color(k), label=KIND_LABELS.get(k, k))
               for k in COMPUTE_KINDS if k in drawn]
    comm = [s for s in spans if s.kind in COMM_KINDS]
    buckets = sorted({s.bucket for s in comm if s.kind == "allreduce" and s.bucket is not None})
    if len(buckets) > BUCKET_ENTRIES:
        handles.append(Patch(color=style.bucket_color(buckets[0]),
                             label=f"all-reduce, {len(buckets)} buckets (colours cycle)"))
    else:
        handles += [Patch(color=style.bucket_color(b), label=f"all-reduce bucket {b}") for b in buckets]
    ops = sorted({s.op for s in comm if not (s.kind == "allreduce" and s.bucket is not None)}, key=str)
    handles += [Patch(color=style.op_color(op), label=op or "collective") for op in ops]
    if "link" in drawn:
        handles.append(Patch(facecolor="white", edgecolor=style.MUTED, hatch=style.LINK_HATCH,
                             label="link transfer (emulated)"))
    if len(handles) > LEGEND_ENTRIES:
        more = len(handles) - (LEGEND_ENTRIES - 1)
        handles = handles[:LEGEND_ENTRIES - 1] + [Patch(color="white", label=f"… {more} more")]
    return handles

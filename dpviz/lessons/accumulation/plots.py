"""Figures for gradient accumulation: the micro-step schedule, the K sweep, the pitfalls."""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from dpviz.analysis.overlap import steady_steps
from dpviz.core.link import link_note
from dpviz.core.record import RunRecord
from dpviz.lessons.accumulation.records import (
    AccumulationCheck, AccumulationSweep, GradientCheck, accumulation_row, micro_step_counts,
    run_lengths,
)
from dpviz.plots import style
from dpviz.plots.bars import hbars, link_bars, stacked_rows
from dpviz.plots.legends import kept_legend
from dpviz.plots.legibility import place_labels

COMPUTE_KINDS = ("forward", "backward", "optimizer")
# The right placement in the "done" colour, the two pitfalls in warning colours.
SCOPE_COLORS = {"forward_backward": style.kind_color("optimizer"),
                "backward_only": style.kind_color("recompute"),
                "off": style.kind_color("backward")}
LANE = 1.0      # height of a compute or all-reduce lane
ROW = 2.8       # vertical room per rank: compute lane above, all-reduce lane below


def plot_schedule(record: RunRecord, step: int | None = None, ax=None):
    """One optimizer step of every rank, micro-step by micro-step.

    Each rank gets a compute lane (forward, backward, optimizer) and an all-reduce lane
    (coloured by bucket); grey boxes are its micro-steps, labelled on rank 0 "#m: n" with
    the n all-reduces its trace shows. With no_sync placed right: 0, …, 0, one per bucket.
    The gloo worker thread may close an all-reduce event late; `dpviz.analysis.scan` ends each
    all-reduce no later than the micro-step that launched it, and the figure's tag says so.
    """
    ax = style.new_axes(ax, figsize=(11, 1.4 + 1.2 * record.world_size))
    step = steady_steps(record)[-1] if step is None else step
    counts = micro_step_counts(record, step)
    t0 = min(s.start_us for s in record.spans_of(kind="step", step=step))
    ms = lambda us: (us - t0) / 1e3
    yticks, ylabels, labels = [], [], []
    boxes, compute, links, reduces = [], [], [], []   # (span, bottom, height): one collection each
    for rank in range(record.world_size):
        y = (record.world_size - 1 - rank) * ROW
        for m in sorted(record.spans_of(rank, "micro_step", step), key=lambda s: s.start_us):
            boxes.append((m, y - 0.15, 2 * LANE + 0.5))
            if rank == 0:   # alternate two heights: narrow boxes' labels must not collide
                micro = int(m.name.rsplit("#", 1)[-1])
                labels.append(ax.text(ms(m.start_us) + m.dur_us / 2e3, y + 2 * LANE + 0.4 + 0.5 * (micro % 2),
                                      f"#{micro}: {counts[micro]}", ha="center", va="bottom", fontsize=8,
                                      color=style.TEXT,   # reads where a shift puts it on a box's edge
                                      bbox=dict(boxstyle="square,pad=0.1", fc=style.BACKGROUND, ec="none")))
        compute += [(s, y + LANE + 0.1, LANE * 0.9) for s in sorted(
            (s for s in record.spans_of(rank, step=step) if s.kind in COMPUTE_KINDS),
            key=lambda s: COMPUTE_KINDS.index(s.kind))]
        lane = _comm_lane(record.spans_of(rank, "link", step), record.spans_of(rank, "allreduce", step), y)
        links += [mark for mark in lane if mark[0].kind == "link"]   # waiting, no CPU
        reduces += [mark for mark in lane if mark[0].kind != "link"]
        yticks += [y + LANE + 0.55, y + 0.45]
        ylabels += [f"rank {rank} compute", f"rank {rank} all-reduce"]
    # one collection per kind of mark for every rank, coloured bar by bar: each artist costs
    # about the same to make, add and draw, however few its bars (ranks' rows do not overlap)
    bars = lambda marks: ([(ms(s.start_us), s.dur_us / 1e3) for s, _, _ in marks], [(y, h) for _, y, h in marks])
    hbars(ax, *bars(boxes), facecolors="#F2F2F2", edgecolor=style.MUTED, linewidth=0.6)
    hbars(ax, *bars(compute), facecolors=[style.kind_color(s.kind) for s, _, _ in compute], linewidth=0)
    if links:
        link_bars(ax, *bars(links), [style.bucket_color(s.bucket) for s, _, _ in links], linewidth=0.6)
    hbars(ax, *bars(reduces), facecolors=[style.bucket_color(s.bucket) for s, _, _ in reduces], linewidth=0)
    ax.set_yticks(yticks, ylabels)
    ax.set_ylim(-0.4, (record.world_size - 1) * ROW + 2 * LANE + 1.9)
    ax.set_xlabel(f"time in step {step} (ms, common clock)")
    style.tidy(ax)
    cfg = record.config
    ax.set_title(f"K = {cfg['accum_steps']} micro-steps, no_sync {cfg['no_sync']}: all-reduces per "
                 f"micro-step {run_lengths(counts)} (boxes: #micro-step: all-reduces)\nlive run; "
                 f"{link_note(cfg)}", loc="left", fontsize=9)
    buckets = sorted({s.bucket for s in record.spans_of(kind="allreduce", step=step)} - {None})
    handles = [Patch(color=style.kind_color(k), label=k) for k in COMPUTE_KINDS]
    handles += [Patch(color=style.bucket_color(b), label=f"bucket {b}") for b in buckets]
    if cfg.get("link"):
        handles.append(Patch(facecolor="white", edgecolor=style.MUTED, hatch=style.LINK_HATCH,
                             label="link transfer (emulated)"))
    kept_legend(ax, handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    style.tag(ax, style.source_of(record), note=style.adjustment_of(record, micro_steps_drawn=True))
    place_labels(labels[::-1], "a micro-step too short for its label under load",   # the syncing last one first
                 shifts_pt=((0, 0), (0, 9), (0, -9)))
    return ax


def _comm_lane(links, reduces, y: float) -> list[tuple]:
    """(span, bottom, height) of each transfer and all-reduce in a rank's all-reduce lane. A
    bucket's transfer shares a row with the all-reduce that follows it; communication that
    overlaps in time (gloo's two worker threads, or the wire sending the next bucket while this
    one reduces) gets rows of its own, so no bar hides where another ended."""
    wires = defaultdict(list)   # bucket → its transfers, in order
    for wire in sorted(links, key=lambda s: s.start_us):
        wires[wire.bucket].append(wire)
    units = []
    for s in sorted(reduces, key=lambda s: s.start_us):
        units.append(([wires[s.bucket].pop(0)] if wires[s.bucket] else []) + [s])
    units += [[wire] for left in wires.values() for wire in left]   # a transfer whose all-reduce lies past the step
    rows = stacked_rows([(unit[0].start_us, unit[-1].end_us) for unit in units])
    height = LANE / (max(rows, default=0) + 1)
    return [(s, y + row * height, height * 0.9) for unit, row in zip(units, rows) for s in unit]


def plot_sweep_bytes(sweep: AccumulationSweep, ax=None):
    """All-reduced bytes vs K: flat per optimizer step, falling as 1/K per sample."""
    ax = style.new_axes(ax, figsize=(6, 3.5))
    ks = [r.accum_steps for r in sweep.rows]
    ax.plot(ks, [r.bytes_per_step / 1024 for r in sweep.rows], "o-", color=style.kind_color("allreduce"),
            label="per optimizer step (measured)")
    ax.plot(ks, [r.bytes_per_sample / 1024 for r in sweep.rows], "s-", color=style.kind_color("backward"),
            label="per sample (measured)")
    first = sweep.rows[0]
    model = [first.bytes_per_sample * first.accum_steps / k / 1024 for k in ks]
    ax.plot(ks, model, "--", color=style.MUTED, label=f"per sample, model: K={first.accum_steps} value × {first.accum_steps}/K")
    ax.set_yscale("log")
    ax.set_xticks(ks)
    ax.set_xlabel("K (micro-steps per optimizer step)")
    ax.set_ylabel("all-reduced KB per rank")
    ax.set_title(f"{sweep.world_size} ranks: communication per step and per sample", loc="left")
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live", "model")
    return ax


def plot_sweep_time(sweep: AccumulationSweep, ax=None):
    """Step time vs K: it grows with the K micro-steps; per sample the one sync is shared."""
    ax = style.new_axes(ax, figsize=(6, 3.5))
    ks = [r.accum_steps for r in sweep.rows]
    ax.plot(ks, [r.step_ms for r in sweep.rows], "o-", color=style.kind_color("forward"),
            label="ms per optimizer step (median)")
    per100 = [100 / r.samples_per_step for r in sweep.rows]
    ax.plot(ks, [r.ms_per_sample * 100 for r in sweep.rows], "s-", color=style.kind_color("backward"),
            label="ms per 100 samples (median)")
    if any(r.step_ms_quartiles[1] > r.step_ms_quartiles[0] for r in sweep.rows):
        for scale, kind in ((1.0, "forward"), (None, "backward")):
            f = [scale or p for p in per100]
            ax.fill_between(ks, [r.step_ms_quartiles[0] * x for r, x in zip(sweep.rows, f)],
                            [r.step_ms_quartiles[1] * x for r, x in zip(sweep.rows, f)],
                            color=style.kind_color(kind), alpha=0.2, lw=0)
    ax.set_xticks(ks)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("K (micro-steps per optimizer step)")
    ax.set_ylabel("ms (bands: 25-75th percentile)")
    ax.set_title(f"step time, measured live\n{link_note(sweep.config)}", loc="left",
                 fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_scopes(records: dict[str, RunRecord], step: int | None = None, ax=None):
    """All-reduces per micro-step for each no_sync placement (same K): bars from the traces."""
    ax = style.new_axes(ax, figsize=(7, 3.5))
    width = 0.8 / len(records)
    for i, (scope, record) in enumerate(records.items()):
        chosen = steady_steps(record)[-1] if step is None else step
        counts = micro_step_counts(record, chosen)
        kb = accumulation_row(record).bytes_per_step / 1024
        xs = [m + (i - (len(records) - 1) / 2) * width for m in range(len(counts))]
        ax.bar(xs, counts, width * 0.95, color=SCOPE_COLORS.get(scope, style.MUTED),
               label=f"no_sync {scope}: {kb:.0f} KB/step")
    ax.set_xticks(range(len(counts)), [f"micro {m}" for m in range(len(counts))])
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, ax.get_ylim()[1] * 1.45)  # room for the legend above the bars
    ax.set_ylabel("all-reduces (rank 0 trace)")
    ax.set_title("where no_sync() goes decides which micro-steps all-reduce", loc="left")
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_gradient_ratio(checks: Iterable[GradientCheck], ax=None):
    """‖accumulated gradient‖ / ‖large-batch gradient‖ vs K, with and without 1/K scaling."""
    ax = style.new_axes(ax, figsize=(6, 3.5))
    checks = [c for c in checks if c.no_sync == "forward_backward"]
    if not checks:
        raise ValueError("no gradient checks with no_sync around forward and backward to plot")
    for scaled, marker, color in ((True, "o-", style.kind_color("optimizer")),
                                  (False, "s-", style.kind_color("recompute"))):
        mine = sorted((c.accum_steps, c.norm_ratio) for c in checks if c.scale_loss is scaled)
        if mine:
            ax.plot(*zip(*mine), marker, color=color,
                    label="loss / K (measured)" if scaled else "loss not scaled (measured)")
    ks = sorted({c.accum_steps for c in checks})
    ax.plot(ks, ks, ":", color=style.MUTED, label="K: effective learning rate × K")
    ax.set_xticks(ks)
    ax.set_xlabel("K (micro-steps per optimizer step)")
    ax.set_ylabel("‖g accumulated‖ / ‖g large batch‖")
    ax.set_title("accumulated gradient vs one process on the large batch", loc="left")
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


# --- the exercise's figure: yours beside the reference ------------------------------------

def plot_accumulation_exercise(check: AccumulationCheck):
    """All-reduces per micro-step, yours beside dpviz's run loop, and ‖gradient‖ ratios."""
    import matplotlib.pyplot as plt

    yours, ref = check.yours, check.reference
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3), layout="constrained", width_ratios=(3, 1))
    xs = range(check.accum_steps)
    ax.bar([x - 0.2 for x in xs], yours.all_reduces_per_micro, 0.4, color=style.rank_color(0), label="yours")
    ax.bar([x + 0.2 for x in xs], ref.all_reduces_per_micro, 0.4, color=style.MUTED, label="dpviz's run loop")
    ax.set_xticks(list(xs), [f"micro-step {x}" for x in xs])
    ax.set_ylabel("buckets all-reduced (rank 0)")
    ax.set_title("the trace: all-reduces in each micro-step (live)", loc="left", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(0.0, -0.12), ncol=2)
    bx.bar([0, 1], [yours.norm_ratio, 1.0], color=[style.rank_color(0), style.MUTED])
    bx.set_xticks([0, 1], ["yours", "right"])
    bx.set_title("‖gradient‖ / ‖right‖", loc="left", fontsize=10)
    for a in (ax, bx):
        style.tidy(a)
    style.tag(bx, "live")
    return fig

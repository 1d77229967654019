"""FSDP in time, drawn: per rank, each unit's compute, its collectives on the emulated link, and
under them the bytes of parameters the rank holds — its shards, plus the units gathered just in
time (the sawtooth) — against the model of the peak and DDP's and ZeRO-1's full replica."""
from __future__ import annotations

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from dpviz.core.link import link_note
from dpviz.lessons.fsdp.records import (
    FsdpRecord, ROOT, RankStep, describe_knobs, measured_peak, mib, own_compute, record_peak_model,
    summarize,
)
from dpviz.plots import style
from dpviz.plots.bars import hbars, link_bars
from dpviz.plots.legends import kept_legend
from dpviz.plots.legibility import HIDDEN, place_labels, text_extent

MiB = 2 ** 20
LANE = 0.9                      # a compute or link lane's height
BAND = 2.4                      # a memory band's height
ROW = 2 * LANE + BAND + 1.2     # one rank: compute, link, memory, a gap
WAIT_COLOR = "#E15759"          # the main thread blocked on a collective: exposed communication
SHARD_COLOR = "#BFD3E6"
GATHERED_COLOR = "#2A9D8F"
# A unit's name on its compute bar: JupyterLab beside its file browser shows an 11-inch figure
# scaled down, so 8 pt stays above the 7-pt legibility minimum there.
UNIT_PT = 8
# 4 ranks at 2.3 in each were 916 px tall as shown, more than a 900-px window: lanes get thinner
MAX_HEIGHT_IN = 7.0
LABEL_COLORS = {"forward": "white", "backward": style.TEXT}   # WCAG contrast ≥ 3 on each phase's colour


def short(unit: str) -> str:
    """A unit's name as a bar label: blocks.3 → b3, tok_emb → emb, the MLP's Linear 4 → L2."""
    if unit.startswith("blocks."):
        return "b" + unit.split(".")[1]
    if unit == "tok_emb":
        return "emb"
    if unit.isdigit():
        return f"L{int(unit) // 2}"
    return unit


def lanes(row: int, n: int) -> tuple[float, float, float]:
    """(compute y, link y, memory band y) of the `row`-th rank drawn, top first."""
    base = (n - 1 - row) * ROW
    return base + BAND + 0.3 + LANE + 0.15, base + BAND + 0.3, base


def memory_curve(step: RankStep) -> tuple[list[float], list[float]]:
    """(ms, bytes) of what the rank holds over its step: its shards plus every gathered byte
    sampled, as a step line from the step's start to its end."""
    xs, ys = [step.start_ms], [step.shard_bytes]
    for s in step.samples:
        xs.append(s.t_ms)
        ys.append(step.shard_bytes + s.total)
    xs.append(step.end_ms)
    ys.append(ys[-1])
    return xs, ys


def step_area(xs: list[float], base: float, tops: list[float]) -> np.ndarray:
    """The polygon under a post-step curve (`tops[i]` from `xs[i]` to `xs[i + 1]`) down to
    `base`: what `fill_between(xs, base, tops, step="post")` fills, as (n, 2) vertices."""
    x, top = np.asarray(xs, dtype=float), np.asarray(tops, dtype=float)
    upper = np.column_stack([np.repeat(x, 2)[1:-1], np.repeat(top[:-1], 2)])
    return np.vstack([[(x[0], base)], upper, [(x[-1], base)]])


def plot_fsdp_step(record: FsdpRecord, ax=None, ranks=None):
    """One recorded FSDP2 step on every rank, on the common clock: compute (forward, backward,
    the main thread waiting), the link (each all-gather and reduce-scatter: its wire time
    dotted, the real gloo collective solid; unnamed: their names stood apart from the compute
    lane's and read as stray), and the parameter bytes held (measured), with
    the model's peak and the full replica DDP and ZeRO-1 keep.

    Each kind of mark is one collection for every rank (its bars' lanes and colours per bar):
    a knob's move redraws this figure, and each collection added and drawn has a cost of its
    own, most of a move's drawing when each rank's phase, op and line was one
    (benchmarks/knob_latency.py). The y limits are set first: no adding rescales them."""
    ranks = [s.rank for s in record.ranks] if ranks is None else list(ranks)
    ax = style.new_axes(ax, figsize=(11, min(1.2 + 2.3 * len(ranks), MAX_HEIGHT_IN)))
    ax.set_ylim(-0.2, len(ranks) * ROW - 1.0)
    top = max(record.full_bytes, *(measured_peak(record.rank_step(r)) for r in ranks)) * 1.08
    scale = BAND / top
    model = record_peak_model(record)
    labels, yticks, ylabels = [], [], []   # labels: (text, its bar's x0, x1, y0, y1)
    computes, waits, wires, solids, areas, shards, lines = [], [], [], [], [], [], []
    for row, rank in enumerate(ranks):
        step = record.rank_step(rank)
        y_compute, y_link, y_mem = lanes(row, len(ranks))
        for u, phase, a, b in own_compute(record, step):
            computes.append((a, b - a, y_compute, style.kind_color(phase)))
            if u != ROOT:
                labels.append((ax.text((a + b) / 2, y_compute + LANE / 2, short(u), ha="center", va="center",
                                       fontsize=UNIT_PT, color=LABEL_COLORS[phase]), a, b, y_compute,
                               y_compute + LANE))
        waits += [(w.start_ms, w.end_ms - w.start_ms, y_compute + LANE * 0.3) for w in step.waits]
        for t in step.transfers:
            wires.append((t.link_start_ms, t.link_end_ms - t.link_start_ms, y_link, style.op_color(t.op)))
            solids.append((t.link_end_ms, t.done_ms - t.link_end_ms, y_link, style.op_color(t.op)))
        xs, ys = memory_curve(step)
        areas.append(step_area(xs, y_mem, [y_mem + y * scale for y in ys]))
        shards.append((xs[0], xs[-1] - xs[0], y_mem, step.shard_bytes * scale))
        lines += [(y_mem + model.peak_bytes * scale, xs[0], xs[-1], style.TEXT, "--", 1.0),
                  (y_mem + record.full_bytes * scale, xs[0], xs[-1], style.MUTED, ":", 1.5),
                  (y_mem, xs[0], xs[-1], style.MUTED, "-", 0.5)]
        yticks += [y_compute + LANE / 2, y_link + LANE / 2, y_mem + BAND / 2, y_mem + top * scale]
        ylabels += [f"rank {rank} compute", f"rank {rank} link", f"rank {rank} params", f"{top / MiB:.1f} MiB"]
    _bars(ax, computes, LANE, edgecolor="white", linewidth=0.3)
    _bars(ax, [(x, w, y, WAIT_COLOR) for x, w, y in waits], LANE * 0.4, edgecolor="none")
    if wires:
        link_bars(ax, [(x, w) for x, w, _, _ in wires], [(y, LANE) for _, _, y, _ in wires],
                  [c for *_, c in wires], linewidth=0.6)
        _bars(ax, solids, LANE, edgecolor="none")
    ax.add_collection(PolyCollection(areas, facecolors=GATHERED_COLOR, alpha=0.55, linewidths=0))
    hbars(ax, [(x, w) for x, w, _, _ in shards], [(y, h) for _, _, y, h in shards], facecolors=SHARD_COLOR,
          edgecolor="none")
    y, x0, x1, colors, styles, widths = zip(*lines)
    ax.hlines(y, x0, x1, colors=list(colors), linestyles=list(styles), linewidths=list(widths))
    ax.set_yticks(yticks, ylabels, fontsize=8)
    ax.set_xlabel(f"time in step {record.step} (ms, common clock)")
    s = summarize(record)
    note = link_note(record.config)
    ax.set_title(f"FSDP2 on {record.world_size} ranks, {describe_knobs(record.knobs)}\npeak {mib(s.peak_bytes)} "
                 f"measured, {mib(s.model_bytes)} model; exposed communication {s.exposed_ms:.0f} ms (link wait "
                 f"{s.link_wait_ms:.0f}, peer wait {s.peer_wait_ms:.0f}) of a "
                 f"{s.step_ms:.0f} ms step (mean over ranks); {s.all_gathers} all-gathers per step"
                 + (f"\n{note}" if note else ""), loc="left", fontsize=9)
    style.tidy(ax)
    kept_legend(ax, legend_handles(), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    style.tag(ax, "live", "model")
    place_labels([t for t, *_ in labels], "no room on its bar")
    keep_inside(ax, labels, "wider than its bar")
    return ax


def _bars(ax, bars: list[tuple[float, float, float, str]], height: float, **kwargs) -> None:
    """(x, width, y, colour) bars of one `height`, as one collection (none where empty)."""
    if bars:
        hbars(ax, [(x, w) for x, w, _, _ in bars], [(y, height) for _, _, y, _ in bars],
              facecolors=[c for *_, c in bars], **kwargs)


def keep_inside(ax, labels: list[tuple], why: str) -> list:
    """Hide each label (text, x0, x1, y0, y1) that does not fit inside its bar (data
    coordinates), marked as `place_labels` marks what it hides; call after `place_labels`,
    which lays the figure out. A unit's bar is as wide as its time: a short one has no room."""
    renderer = ax.figure.canvas.get_renderer()
    hidden = []
    for text, x0, x1, y0, y1 in labels:
        if not text.get_visible():
            continue
        (bx0, by0), (bx1, by1) = ax.transData.transform([(x0, y0), (x1, y1)])
        box = text_extent(text, renderer)
        if box.x0 < bx0 - 0.5 or box.x1 > bx1 + 0.5 or box.y0 < by0 - 0.5 or box.y1 > by1 + 0.5:
            text.set_visible(False)
            text.set_label(HIDDEN + why)
            hidden.append(text)
    return hidden


def legend_handles() -> list:
    return [Patch(color=style.kind_color("forward"), label="forward"),
            Patch(color=style.kind_color("backward"), label="backward"),
            Patch(color=WAIT_COLOR, label="waiting on a collective\n(exposed communication)"),
            Patch(facecolor="white", edgecolor=style.op_color("all_gather"), hatch=style.LINK_HATCH,
                  label="all-gather on the link"),
            Patch(facecolor="white", edgecolor=style.op_color("reduce_scatter"), hatch=style.LINK_HATCH,
                  label="reduce-scatter on the link"),
            Patch(color=style.MUTED, label="then the real gloo collective\n(solid, the op's colour)"),
            Patch(color=SHARD_COLOR, label="Ψ/N: this rank's parameter shards"),
            Patch(color=GATHERED_COLOR, alpha=0.55, label="+ gathered parameters\n(storage, measured)"),
            Line2D([], [], color=style.TEXT, ls="--", lw=1, label="model: Ψ/N + units in flight"),
            Line2D([], [], color=style.MUTED, ls=":", lw=1.5, label="DDP and ZeRO-1: all parameters, Ψ")]


def plot_peaks(records: list[FsdpRecord], ax=None):
    """Measured peak (every rank: dots) against the model (bars) for several records, with the
    full replica DDP and ZeRO-1 keep: which knob settings save memory, and the model's gap."""
    ax = style.new_axes(ax, figsize=(8, 3.4))
    for i, record in enumerate(records):
        model = record_peak_model(record)
        ax.bar(i, model.peak_bytes / MiB, color=SHARD_COLOR, width=0.6, label="model" if i == 0 else None)
        peaks = [measured_peak(s) / MiB for s in record.ranks]
        ax.scatter([i] * len(peaks), peaks, color=GATHERED_COLOR, zorder=3, s=18,
                   label="measured, each rank" if i == 0 else None)
        ax.text(i, model.peak_bytes / MiB, f"{model.peak_bytes / MiB:.2f}", ha="center", va="bottom", fontsize=8)
    full = records[0].full_bytes / MiB
    ax.axhline(full, color=style.MUTED, ls=":", lw=1.5, label=f"DDP and ZeRO-1: full replica {full:.2f} MiB")
    ax.set_xticks(range(len(records)), [_knob_label(r) for r in records], fontsize=8)
    ax.set_ylabel("peak parameter MiB per rank")
    ax.set_ylim(0, max(full, *(measured_peak(s) / MiB for r in records for s in r.ranks)) * 1.25)
    ax.set_title(f"peak parameter bytes, {records[0].world_size} ranks", loc="left")
    style.tidy(ax)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    style.tag(ax, "live", "model")
    return ax


def _knob_label(record: FsdpRecord) -> str:
    k = record.knobs
    if k.units == "model":
        return "whole model\none unit"
    return f"{'reshard' if k.reshard_after_forward else 'keep'} after fwd\nprefetch {'on' if k.prefetch else 'off'}"


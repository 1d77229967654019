"""Activation checkpointing figures: the memory curve of one step, peak vs k, cost vs k."""
from __future__ import annotations

import math

from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from dpviz.lessons.checkpointing.records import CheckpointingRecord, floor_sets_peak, model_step_ms
from dpviz.plots import style

MB = 2 ** 20


def curve_xy(points) -> tuple[list[float], list[float]]:
    """(ms, MB) lists of a curve, ready for a step plot."""
    return [p.t_ms for p in points], [p.bytes / MB for p in points]


def peak_table(record: CheckpointingRecord) -> dict[str, list]:
    """Measured and predicted peaks (MB) and recompute cost per k: what `plot_peaks` draws.

    `model_k`/`model_mb` cover every k from 1 to n (the √n curve); `k`/`measured_mb`/
    `predicted_mb` only the measured rows with k > 0; `none_mb` is the measured k = 0 peak.
    """
    rows = [r for r in record.rows if r.checkpoint_every]
    return dict(
        model_k=[p.checkpoint_every for p in record.model if p.checkpoint_every],
        model_mb=[p.peak_bytes / MB for p in record.model if p.checkpoint_every],
        k=[r.checkpoint_every for r in rows],
        measured_mb=[r.peak_activation_bytes / MB for r in rows],
        predicted_mb=[r.prediction.peak_bytes / MB for r in rows],
        none_mb=record.row(0).peak_activation_bytes / MB)


def _label(k: int) -> str:
    return "no checkpointing" if k == 0 else f"checkpoint every {k}"


def plot_memory_curve(record: CheckpointingRecord, checkpoint_every: int, ax=None, reference: bool = True):
    """One step's bytes over time: allocator (solid), autograd's saved tensors (dashed).

    Backward is shaded, each recomputed forward inside it in the recompute colour; the
    dotted line is the model's predicted peak. `reference` overlays the k = 0 curve in grey.
    """
    ax = style.new_axes(ax, figsize=(9, 3.5))
    row = record.row(checkpoint_every)
    if reference and checkpoint_every:
        ax.step(*curve_xy(record.row(0).curve), where="post", color=style.MUTED, lw=1,
                label=_label(0))
    ax.axvspan(row.forward_ms, row.step_ms, color=style.kind_color("backward"), alpha=0.08, lw=0)
    for start, end in row.recompute_spans:
        ax.axvspan(start, end, color=style.kind_color("recompute"), alpha=0.25, lw=0)
    ax.step(*curve_xy(row.curve), where="post", color=style.kind_color("forward"), lw=1.6,
            label=f"{_label(checkpoint_every)}: allocated")
    ax.step(*curve_xy(row.saved_curve), where="post", color=style.kind_color("forward"), lw=1,
            ls="--", label="held by autograd (saved-tensor hooks)")
    ax.axhline(row.prediction.peak_bytes / MB, color=style.TEXT, ls=":", lw=1, label="model peak")
    handles, _ = ax.get_legend_handles_labels()
    handles.append(Patch(color=style.kind_color("backward"), alpha=0.2, label="backward"))
    if row.recompute_spans:   # the legend names only what is drawn: no checkpointing, no recompute
        handles.append(Patch(color=style.kind_color("recompute"), alpha=0.4, label="recomputed forward"))
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_xlabel("time since forward began (ms)")
    ax.set_ylabel("MB")
    ax.set_title(f"{_label(checkpoint_every)}: peak {row.peak_activation_bytes / MB:.1f} MB measured, "
                 f"{row.prediction.peak_bytes / MB:.1f} MB predicted", loc="left")
    style.tidy(ax)
    style.tag(ax, "live", "model")
    return ax


def peaks_title(record: CheckpointingRecord) -> str:
    """What sets the modelled peak: n/k inputs + one segment, or, where the loss's floor
    does (a GPT's logits, `floor_sets_peak`), that floor, naming the k it holds for."""
    title = f"{record.layers} blocks: peak ≈ n/k inputs + one segment"
    floored = floor_sets_peak(record)
    if not floored:
        return title
    every = [p.checkpoint_every for p in record.model if p.checkpoint_every]
    ks = (f"{floored[0]}–{floored[-1]}" if len(floored) > 2
          and floored == tuple(range(floored[0], floored[-1] + 1)) else ", ".join(map(str, floored)))
    rest = "" if len(floored) == len(every) else ", else n/k inputs + one segment"
    return (f"{record.layers} blocks: the loss's floor sets the peak at k = {ks}\n"
            f"(held after forward + two logit-sized gradients){rest}")


def plot_peaks(record: CheckpointingRecord, ax=None):
    """Peak memory vs k: the model for every k, the measured rows on top, √n marked."""
    ax = style.new_axes(ax, figsize=(6, 3.5))
    t = peak_table(record)
    ax.plot(t["model_k"], t["model_mb"], color=style.MUTED, marker=".", label="model")
    ax.plot(t["k"], t["measured_mb"], "o", color=style.kind_color("forward"), label="measured")
    ax.axhline(t["none_mb"], color=style.kind_color("backward"), ls="--", lw=1,
               label="measured, no checkpointing")
    ax.axvline(math.sqrt(record.layers), color=style.TEXT, ls=":", lw=1, label="√n")
    ax.set_xlabel("checkpoint every k blocks")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # k is a whole number: no 2.5, 7.5 ticks
    ax.set_ylabel("peak MB")
    ax.set_ylim(bottom=0)
    ax.set_title(peaks_title(record), loc="left")
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live", "model")
    return ax


def cost_table(record: CheckpointingRecord) -> dict[str, list]:
    """Per measured k (sorted): forward, backward-without-recompute and recompute ms, and
    the model's step time: the k = 0 step plus one forward per recomputed block pass."""
    rows = sorted(record.rows, key=lambda r: r.checkpoint_every)
    return dict(
        k=[r.checkpoint_every for r in rows],
        forward_ms=[r.forward_ms for r in rows],
        backward_ms=[r.backward_ms - r.recompute_ms for r in rows],
        recompute_ms=[r.recompute_ms for r in rows],
        model_step_ms=[model_step_ms(record, r) for r in rows])


def plot_recompute(record: CheckpointingRecord, ax=None):
    """Time per step vs k: forward, backward, and the recomputed forward inside backward.

    The model's extra compute is one forward for any k ≥ 1 (every segment re-runs once);
    the black tick is the k = 0 step plus that forward.
    """
    ax = style.new_axes(ax, figsize=(6, 3.5))
    t = cost_table(record)
    x = list(range(len(t["k"])))
    top = [f + b for f, b in zip(t["forward_ms"], t["backward_ms"])]
    ax.bar(x, t["forward_ms"], color=style.kind_color("forward"), label="forward")
    ax.bar(x, t["backward_ms"], bottom=t["forward_ms"], color=style.kind_color("backward"),
           label="backward")
    ax.bar(x, t["recompute_ms"], bottom=top, color=style.kind_color("recompute"),
           label="recomputed forward (in backward)")
    ax.scatter(x, t["model_step_ms"], marker="_", s=900, color=style.TEXT, zorder=3,
               label="model: no-checkpoint step + one forward\n(compute only; one timed step per k)")
    ax.set_xticks(x, [str(k) for k in t["k"]])
    ax.set_xlabel("checkpoint every k blocks (0 = none)")
    ax.set_ylabel("ms per step")
    ax.set_title("what checkpointing costs", loc="left")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    style.tidy(ax)
    style.tag(ax, "live")
    return ax

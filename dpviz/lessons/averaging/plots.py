"""The worked example's trajectory, uneven-shard errors, parameter vs gradient averaging, hooks."""
from __future__ import annotations

from matplotlib.ticker import MaxNLocator

from dpviz.lessons.averaging.records import (
    AveragingComparison, HookCheck, HookComparison, UnevenShards, WorkedExample,
)
from dpviz.plots import style


def plot_worked_example(examples: list[WorkedExample], ax=None):
    """w after each step on the live ranks, one line per loss convention; w* = 2 dashed."""
    ax = style.new_axes(ax, figsize=(6, 3.5))
    for i, ex in enumerate(examples):
        ws = [ex.steps[0].w] + [s.w_after for s in ex.steps]
        ax.plot(range(len(ws)), ws, "o-", color=style.rank_color(i),
                label=f"per-rank {ex.reduction} of squared errors")
    ax.axhline(2.0, color=style.MUTED, ls="--", lw=1, label="best w = 2")
    ax.set(xlabel="step", ylabel="w (identical on both ranks)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # steps are whole: no 0.5, 1.5 ticks
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_uneven(record: UnevenShards, ax=None):
    """Relative error ‖aggregate − full-batch gradient‖/‖full‖ for each way of averaging."""
    ax = style.new_axes(ax, figsize=(7, 2.6))
    names = list(record.relative_errors)
    vals = [max(record.relative_errors[n], 1e-12) for n in names]
    colors = ["#009E73" if v < 1e-5 else "#D55E00" for v in vals]
    ax.barh(range(len(names)), vals, color=colors)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.1e}", va="center", fontsize=8)
    ax.set_xlabel("relative error vs the full-batch gradient (log)")
    ax.set_title(f"shards of {', '.join(map(str, record.sizes))} samples on "
                 f"{len(record.sizes)} live ranks", loc="left")
    style.tidy(ax)
    style.tag(ax, "live", note="0 drawn at 1e-12")
    return ax


def _run_label(run) -> str:
    if run.mode == "gradient":
        return f"gradient averaging every step ({run.averages} all-reduces)"
    return f"parameter averaging every {run.period} steps ({run.averages} all-reduces)"


def plot_drift(record: AveragingComparison, ax=None):
    """RMS distance of each replica from the replicas' mean, after each local update."""
    ax = style.new_axes(ax, figsize=(7, 3))
    for i, run in enumerate(record.runs):
        ax.plot(range(1, len(run.drift) + 1), run.drift, color=style.rank_color(i), lw=1.2,
                label=_run_label(run))
    ax.set(xlabel="step", ylabel="replica drift ‖θ_r − θ̄‖ (RMS)")
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_averaging_loss(record: AveragingComparison, ax=None):
    """Held-out loss of the averaged model θ̄ after each step."""
    ax = style.new_axes(ax, figsize=(7, 3))
    for i, run in enumerate(record.runs):
        ax.plot(range(1, len(run.eval_loss) + 1), run.eval_loss, color=style.rank_color(i), lw=1.2,
                label=_run_label(run))
    ax.set(xlabel="step", ylabel="held-out loss of θ̄", yscale="log")
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_hook_check(record: HookComparison, ax=None):
    """Per step, for each hook: parameters after backward vs after the step vs large-batch SGD.

    The weight-averaging hook (picotron #39) is 0 after backward — a naive check passes — and
    off everywhere else.
    """
    ax = style.new_axes(ax, figsize=(7, 3.4))
    checks = (("params_after_backward", "ranks' θ after backward", ":"),
              ("params_after_step", "ranks' θ after optimizer.step()", "--"),
              ("vs_large_batch", "θ vs one process, whole batch", "-"))
    for i, run in enumerate(record.runs):
        for field, label, ls in checks:
            values = [max(v, 1e-12) for v in getattr(run, field)]   # log axis: 0 drawn at 1e-12
            ax.plot(range(len(values)), values, ls=ls, marker="o", ms=3, color=style.rank_color(i),
                    label=f"hook averages {run.mode}s: {label}")
    ax.set(yscale="log", xlabel="step", ylabel="max |difference| (0 drawn at 1e-12)")
    ax.set_title("weight-averaging hook: ranks agree after backward", loc="left",
                 fontsize=10)
    ax.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    style.tidy(ax)
    style.tag(ax, "live", note="0 drawn at 1e-12")
    return ax


# --- the exercise's figure: yours beside the reference ------------------------------------

def plot_hook_exercise(check: HookCheck):
    """Per parameter, ‖your gradient‖ / ‖mean over ranks‖ (1 is right) beside rank 0's own,
    never-averaged gradient: a hook that communicated nothing lands on the grey bars."""
    import matplotlib.pyplot as plt

    run = check.yours
    fig, ax = plt.subplots(figsize=(1.5 + 0.9 * len(run.names), 3.2), layout="constrained")
    xs = range(len(run.names))
    ax.bar([x - 0.2 for x in xs], run.norm_ratio, 0.4, color=style.rank_color(0), label="yours (rank 0, live)")
    ax.bar([x + 0.2 for x in xs], check.unsynced_ratio, 0.4, color=style.MUTED,
           label="rank 0's own gradient, not averaged")
    ax.axhline(1.0, color=style.TEXT, linestyle="--", linewidth=1)
    ax.text(len(run.names) - 0.5, 1.0, " mean over ranks", va="bottom", ha="right", fontsize=8)
    ax.set_xticks(list(xs), run.names, fontsize=8)
    ax.set_ylabel("‖grad‖ / ‖mean over ranks‖")
    ax.set_title(f"{check.world_size} ranks: {check.verdict.mistake or 'pass'}", loc="left", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    style.tidy(ax)
    style.tag(ax, "live")
    return fig

"""Pipeline schedules drawn from their records: a Gantt chart per run, the bubble over m."""
from __future__ import annotations

from matplotlib.patches import Patch

from dpviz.lessons.pipeline.records import PipelineRun, PipelineSweep, gpipe_formula
from dpviz.plots import style
from dpviz.plots.legibility import readable_on

IDLE = "#EEEEEE"


def plot_gantt(run: PipelineRun, ax=None, step=None):
    """Stages × time on the shared clock: forwards and backwards labelled by micro-batch.

    Grey is the bubble: time a stage spends waiting for its neighbour (or for a transfer).
    `step` is a PipelineStep of this run; by default the least disturbed one (`best_step`).
    """
    step = run.best_step if step is None else step
    ax = style.new_axes(ax, figsize=(10, 0.9 + 0.8 * run.stages))
    for rank in range(run.stages):
        y = run.stages - 1 - rank
        ax.broken_barh([(0, step.makespan_ms)], (y - 0.4, 0.8), color=IDLE)
        for e in (e for e in step.events if e.rank == rank):
            ax.broken_barh([(e.start_ms, e.end_ms - e.start_ms)], (y - 0.4, 0.8),
                           color=style.kind_color(e.kind), edgecolor="white", linewidth=0.5)
            if e.end_ms - e.start_ms > step.makespan_ms / 60:
                ax.text((e.start_ms + e.end_ms) / 2, y, str(e.micro), ha="center", va="center",
                        fontsize=7, color=readable_on(style.kind_color(e.kind), dark=style.TEXT))
    ax.set_yticks(range(run.stages), [f"stage {r} (rank {r})" for r in reversed(range(run.stages))])
    ax.set_xlim(0, step.makespan_ms)
    ax.set_xlabel("ms since the step's first forward (one clock for all ranks)")
    ax.set_title(f"{run.schedule}, m = {run.micro_batches}: bubble {step.mean_bubble:.0%} measured, "
                 f"{run.formula:.0%} by (p−1)/(m+p−1)", loc="left", fontsize=10)
    ax.legend(handles=[Patch(color=style.kind_color("forward"), label="forward"),
                       Patch(color=style.kind_color("backward"), label="backward"),
                       Patch(color=IDLE, label="idle (bubble)")],
              fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_bubble(sweep: PipelineSweep, ax=None):
    """Measured idle fraction against m for each schedule, and GPipe's formula as a line."""
    ax = style.new_axes(ax, figsize=(6, 3.5))
    ms = sorted({r.micro_batches for r in sweep.runs})
    p = sweep.runs[0].stages
    grid = [ms[0] + i * (ms[-1] - ms[0]) / 100 for i in range(101)]
    ax.plot(grid, [gpipe_formula(p, m) for m in grid], color=style.MUTED, ls="--",
            label=f"(p−1)/(m+p−1), p = {p}")
    for i, sched in enumerate(dict.fromkeys(r.schedule for r in sweep.runs)):
        runs = sorted((r for r in sweep.runs if r.schedule == sched), key=lambda r: r.micro_batches)
        xs = [r.micro_batches for r in runs]
        ax.plot(xs, [r.bubble for r in runs], "o-", color=style.rank_color(i),
                label=f"{sched}: measured (best of {len(runs[0].steps)})")
        ax.plot(xs, [r.median_bubble for r in runs], "o", mfc="none", color=style.rank_color(i),
                label=f"{sched}: median of repeats")
    ax.set(xlabel="micro-batches m", ylabel="idle fraction per rank", xscale="log", ylim=(0, 1))
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.minorticks_off()
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live", "model")
    return ax


def plot_in_flight(sweep: PipelineSweep, ax=None):
    """Peak bytes autograd holds for un-backwarded micro-batches, per schedule, against m."""
    ax = style.new_axes(ax, figsize=(6, 3.5))
    for i, sched in enumerate(dict.fromkeys(r.schedule for r in sweep.runs)):
        runs = sorted((r for r in sweep.runs if r.schedule == sched), key=lambda r: r.micro_batches)
        ax.plot([r.micro_batches for r in runs], [r.peak_saved_bytes[0] / 2**20 for r in runs],
                "o-", color=style.rank_color(i), label=f"{sched}, stage 0")
    ax.set(xlabel="micro-batches m", ylabel="peak saved activations (MiB)", xscale="log")
    ms = sorted({r.micro_batches for r in sweep.runs})
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.minorticks_off()
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax

"""DDP = large-batch SGD, drawn: parameter differences per step, against the rounding bound
the printed check compares them with (float32 epsilon only where a record has no bound)."""
from __future__ import annotations

from dpviz.core.record import RunRecord
from dpviz.plots import style

FLOAT32_EPS = 1.1920929e-07
FLOOR = 1e-12  # where a difference is exactly 0, draw it here (log axis) and say "identical"


def _draw_reference(ax, record: RunRecord) -> None:
    """The line a difference is judged against: each step's rounding bound, the number
    `describe_checks` prints beside it (drawing float32 epsilon under a printed 1e-05 bound
    would show a different test from the one printed); a record without bounds gets epsilon."""
    steps = [c.step for c in record.checks]
    bounds = [c.rounding_bound for c in record.checks]
    if any(b is None for b in bounds):
        ax.axhline(FLOAT32_EPS, color=style.MUTED, linestyle="--", linewidth=1)
        ax.annotate("float32 epsilon (no rounding bound recorded)", (steps[-1] + 0.45, FLOAT32_EPS),
                    ha="right", va="bottom", fontsize=8, color=style.MUTED)
        return
    ax.step([steps[0] - 0.5, *[s + 0.5 for s in steps]], [bounds[0], *bounds], where="pre",
            color=style.MUTED, linestyle="--", linewidth=1)
    ax.annotate("rounding bound (printed above)", (steps[-1] + 0.45, bounds[-1]), ha="right",
                va="bottom", fontsize=8, color=style.MUTED)


def plot_checks(record: RunRecord, ax=None):
    """Max |Δparam| after each step: across ranks, and against one process on the whole batch."""
    if not record.checks:
        raise ValueError("this record has no parameter checks: a live run with checks=True "
                         "(the default) records them; a loaded trace or a checks=False run does not")
    ax = style.new_axes(ax, figsize=(7, 3.2))
    steps = [c.step for c in record.checks]
    series = {"across ranks": [c.max_diff_across_ranks for c in record.checks],
              "vs one process, whole batch": [c.max_diff_vs_single_process for c in record.checks]}
    width = 0.38
    for i, (label, diffs) in enumerate(series.items()):
        xs = [s + (i - 0.5) * width for s in steps]
        bars = ax.bar(xs, [max(d, FLOOR) for d in diffs], width, label=label,
                      color=style.RANK_COLORS[i])
        for bar, d in zip(bars, diffs):   # upright: a line wide, over its own bar however many steps
            ax.annotate("identical" if d == 0 else f"{d:.0e}", (bar.get_x() + width / 2, max(d, FLOOR)),
                        xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", rotation=90,
                        fontsize=8)
    _draw_reference(ax, record)
    ax.set_yscale("log")
    bounds = [c.rounding_bound for c in record.checks if c.rounding_bound is not None]
    ax.set_ylim(FLOOR / 3, max([1e-2, *[10 * b for b in bounds]]))
    ax.set_xticks(steps, [f"step {s}" for s in steps])
    ax.set_ylabel("max |Δ parameter|")
    ax.set_title(f"{record.world_size} ranks: parameters after each step", loc="left")
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    style.tidy(ax)
    style.tag(ax, style.source_of(record), note="0 drawn at 1e-12")
    return ax

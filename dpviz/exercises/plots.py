"""Figures of exercise checks: the learner's attempt beside the reference, where they differ.

Drawn from the check records alone (`dpviz.exercises.records`), so a saved check renders
without torch or ranks.
"""
from __future__ import annotations

from matplotlib.patches import FancyArrowPatch, Rectangle

from .records import AccumulationCheck, BucketsCheck, HookCheck, RingCheck, RingRun, Zero1Check
from ..plots import style
from ..plots.legibility import readable_on
from ..plots.style import COLUMN_IN
from ..collectives.plots import draw_grid, inputs_legend, rank_axis

WRONG = "#D62728"


def _ring_panel(ax, run: RingRun, frame: int, other: RingRun, title: str) -> None:
    k = min(frame, len(run.frames) - 1)
    n, values, holds = run.world_size, run.frames[k], run.holds[k]
    draw_grid(ax, 0, values, holds, n, [a for a, _ in run.chunks[1:]])
    theirs = other.frames[min(frame, len(other.frames) - 1)]
    for rank, (mine, ref) in enumerate(zip(values, theirs)):
        for i, (a, b) in enumerate(zip(mine, ref)):
            if a != b:
                ax.add_patch(Rectangle((i + 0.04, n - 1 - rank + 0.04), 0.92, 0.92, fill=False,
                                       edgecolor=WRONG, linewidth=2, zorder=6))
    for send in (s for s in run.sends if s.step == k - 1):
        lo, hi = (send.start, send.stop) if send.start is not None else (0, run.elements)
        x = (lo + hi) / 2
        ax.add_patch(FancyArrowPatch((x - 0.15, n - 1 - send.src + 0.5), (x + 0.15, n - 1 - send.dst + 0.5),
                                     arrowstyle="-|>", mutation_scale=12, color=style.rank_color(send.src),
                                     linewidth=1.8, connectionstyle="arc3,rad=-0.35", zorder=5,
                                     linestyle="-" if send.start is not None else "--"))
    rank_axis(ax, n, run.elements)
    steps = max(run.steps_per_rank)
    ax.set_title(f"{title}: {'inputs' if k == 0 else f'after step {k} of {steps}'}\n"
                 f"bytes sent per rank {list(run.bytes_sent_per_rank)}", loc="left", fontsize=9)


def plot_ring_check(check: RingCheck):
    """Yours (live) beside dpviz's ring (model) at the first frame that differs; red boxes
    mark your cells that differ, stripes say whose inputs a cell sums (measured on your
    ranks with inputs 8^rank), arrows are that step's messages (dashed: payload not a view
    of buf). Returns the Figure."""
    import matplotlib.pyplot as plt

    if check.yours is None:
        raise ValueError("this check has no attempt to draw (the code raised, hung or is not written)")
    frame = check.first_diff if check.first_diff is not None else len(check.yours.frames) - 1
    n, width = check.reference.world_size, check.reference.elements
    panel_w, panel_h = 1.5 + 0.45 * width, 1.2 + 0.5 * n
    side_by_side = 2 * panel_w + 1.5 <= COLUMN_IN    # else stacked: scaled to the column, type would shrink
    fig, axes = plt.subplots(1 if side_by_side else 2, 2 if side_by_side else 1, layout="constrained",
                             figsize=(2 * panel_w + 1.5, panel_h) if side_by_side else (panel_w + 1.5, 2 * panel_h + 0.4))
    _ring_panel(axes[0], check.yours, frame, check.reference, "yours (live ranks)")
    _ring_panel(axes[1], check.reference, frame, check.yours, "dpviz's ring (model)")
    inputs_legend(axes[1], n)
    style.tag(axes[0], "live")
    style.tag(axes[1], "model")
    fig.suptitle(check.verdict.message.split(":")[0], x=0.01, ha="left", fontsize=10)
    return fig


def plot_check(check):
    """The figure for any exercise check record."""
    for kind, plot_kind in _PLOTS.items():
        if isinstance(check, kind):
            return plot_kind(check)
    raise ValueError(f"no figure for {type(check).__name__}")


_PLOTS = {RingCheck: plot_ring_check}


def plot_hook_check(check: HookCheck):
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


_PLOTS[HookCheck] = plot_hook_check


def _bucket_row(ax, y: float, buckets, sizes) -> None:
    left = 0.0
    for k, bucket in enumerate(buckets):
        width = sum(sizes[i] for i in bucket) / 2**20
        ax.barh(y, width, left=left, color=style.bucket_color(k), edgecolor="white")
        label = f"b{k}: {bucket[0]}…{bucket[-1]}" if len(bucket) > 1 else f"b{k}: {bucket[0]}"
        ax.text(left + width / 2, y, label, ha="center", va="center", fontsize=8, rotation=90 * (width < 0.6),
                color=readable_on(style.bucket_color(k), dark=style.TEXT))
        left += width


def plot_buckets_check(check: BucketsCheck):
    """The first model where yours differs: your buckets above torch's, each bar as wide as
    its bytes, labelled with its first…last parameter index."""
    import matplotlib.pyplot as plt

    case = check.yours
    fig, ax = plt.subplots(figsize=(11, 2.4), layout="constrained")
    _bucket_row(ax, 1, case.yours, case.param_bytes)
    _bucket_row(ax, 0, case.torch, case.param_bytes)
    ax.set_yticks([1, 0], [f"yours: {len(case.yours)} buckets", f"torch (live rank): {len(case.torch)} buckets"])
    ax.set_xlabel("gradient bytes in packing order (MiB)")
    cap = "default (1 MiB first, then 25 MiB)" if case.bucket_cap_mb is None else f"{case.bucket_cap_mb:g} MiB"
    ax.set_title(f"{case.model} — bucket_cap_mb: {cap}", loc="left", fontsize=10)
    style.tidy(ax)
    style.tag(ax, "live")
    return fig


_PLOTS[BucketsCheck] = plot_buckets_check


def plot_accumulation_check(check: AccumulationCheck):
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


_PLOTS[AccumulationCheck] = plot_accumulation_check


def plot_zero1_check(check: Zero1Check):
    """Left: |yours − plain Adam| along the flat parameters, per rank, against the float32
    tolerance (exact zeros drawn at the floor). Right: bytes of state per rank beside
    ZeRO-1's m and v (8Ψ/N) and plain Adam's (8Ψ)."""
    import matplotlib.pyplot as plt

    run = check.yours
    floor = run.tolerance / 1e4
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.2), layout="constrained", width_ratios=(3, 1))
    for rank, diffs in enumerate(run.abs_diff):
        ax.plot([max(d, floor) for d in diffs], color=style.rank_color(rank), lw=1, label=f"rank {rank}")
    ax.axhline(run.tolerance, color=style.TEXT, linestyle="--", linewidth=1)
    ax.text(run.psi, run.tolerance, " float32 tolerance", va="bottom", ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("parameter index (flat)")
    ax.set_ylabel("|yours − plain Adam|")
    ax.text(0, floor, "exactly equal", va="bottom", fontsize=7, color=style.MUTED)
    ax.set_title(f"after {run.steps} steps on {run.world_size} live ranks", loc="left", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.08), ncol=run.world_size)
    bx.bar(range(run.world_size), run.state_bytes, color=[style.rank_color(r) for r in range(run.world_size)])
    for y, label in ((8 * run.psi / run.world_size, "ZeRO-1: 8Ψ/N"), (8 * run.psi, "plain Adam: 8Ψ")):
        bx.axhline(y, color=style.MUTED, linestyle=":", linewidth=1)
        bx.text(run.world_size - 0.5, y, label, va="bottom", ha="right", fontsize=7)
    bx.set_xticks(range(run.world_size), [f"rank {r}" for r in range(run.world_size)])
    bx.set_ylabel("bytes in your state")
    for a in (ax, bx):
        style.tidy(a)
    style.tag(ax, "live", note="exact zeros drawn at the floor")
    return fig


_PLOTS[Zero1Check] = plot_zero1_check

"""ZeRO figures: the calculator's per-rank bytes by stage, and live shards against it."""
from __future__ import annotations

from dpviz.lessons.memory.plots import PART_COLORS, PART_LABELS
from dpviz.lessons.zero.records import (
    K_MIXED, STAGES, Zero1Check, ZeroSweep, model_for, zero_memory,
)
from dpviz.plots import style

GB = 1e9
MB = 1e6
STRATEGY_LABELS = {"ddp": "DDP + Adam (stage 0)", "zero1": "ZeroRedundancyOptimizer (stage 1)",
                   "fsdp": "FSDP2 fully_shard (stage 3)"}


def plot_zero_stages(psi: float, world_size: int, k: float = K_MIXED, stage: int | None = None, ax=None,
                     param_bytes: float = 2, grad_bytes: float = 2):
    """Stacked per-rank GB of params / grads / optimizer state for stages 0-3 (calculator)."""
    ax = style.new_axes(ax, figsize=(7, 3.5))
    for i, s in enumerate(STAGES):
        b = zero_memory(psi, world_size, s, k, param_bytes, grad_bytes)
        bottom = 0.0
        for part, value in (("params", b.params), ("grads", b.grads), ("optimizer", b.optimizer)):
            ax.bar(i, value / GB, bottom=bottom, color=PART_COLORS[part], width=0.6,
                   edgecolor=style.TEXT if s == stage else "none", linewidth=1.5,
                   label=PART_LABELS[part] if i == 0 else None)
            bottom += value / GB
        ax.text(i, bottom, f"{bottom:.1f} GB", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(STAGES)), ["0 (DP)", "1 (Pos)", "2 (Pos+g)", "3 (Pos+g+p)"])
    ax.set_xlabel("ZeRO stage")
    ax.set_ylabel("GB per rank (model states)")
    ax.set_title(f"Ψ = {psi / 1e9:g} B parameters, N = {world_size} ranks, "
                 f"{param_bytes:g} + {grad_bytes:g} + {k:g} (K) bytes per parameter", loc="left")
    style.tidy(ax)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    style.tag(ax, "model")
    return ax


def measured_vs_model(sweep: ZeroSweep, part: str = "optimizer") -> dict[str, list[tuple[int, float, float]]]:
    """strategy → [(world size, measured MB on the fullest rank, calculator MB)] for one part."""
    field = {"params": "param_bytes", "grads": "grad_bytes", "optimizer": "optimizer_bytes"}
    if part not in field:
        raise ValueError(f"part must be one of {', '.join(field)}, got {part!r}")
    out: dict[str, list[tuple[int, float, float]]] = {}
    for strategy in sweep.strategies:
        for n in sweep.world_sizes:
            rows = sweep.rows(strategy, n)
            if rows:
                measured = max(getattr(r, field[part]) for r in rows)
                predicted = getattr(model_for(rows[0]), part)
                out.setdefault(strategy, []).append((n, measured / MB, predicted / MB))
    return out


def plot_measured_vs_model(sweep: ZeroSweep, part: str = "optimizer", ax=None):
    """Measured per-rank bytes (dots: every rank) vs the calculator (line) over world sizes."""
    ax = style.new_axes(ax, figsize=(7, 3.5))
    field = {"params": "param_bytes", "grads": "grad_bytes", "optimizer": "optimizer_bytes"}[part]
    markers = "osD^v"
    for i, (strategy, points) in enumerate(measured_vs_model(sweep, part).items()):
        color = style.rank_color(i)
        nudge = 2 ** ((i - 1) * 0.06)      # strategies with equal bytes stay visible side by side
        ns = [n for n, _, _ in points]
        ax.plot([n * nudge for n in ns], [p for _, _, p in points], color=color, alpha=0.6, lw=2,
                label=f"{STRATEGY_LABELS[strategy]}: calculator")
        for n in ns:
            ys = [getattr(r, field) / MB for r in sweep.rows(strategy, n)]
            ax.scatter([n * nudge] * len(ys), ys, color=color, marker=markers[i % len(markers)], s=20,
                       zorder=3, label="  measured on each rank" if n == ns[0] else None)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sweep.world_sizes, [str(n) for n in sweep.world_sizes])
    ax.minorticks_off()
    ax.tick_params(labelsize=11)
    ax.set_xlabel("world size N (live gloo ranks)", fontsize=11)
    ax.set_ylabel(f"{PART_LABELS[part]}, MB per rank", fontsize=11)
    style.tidy(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=10, frameon=False)
    style.tag(ax, "live", "model", note="strategies nudged apart along N")
    return ax


def plot_collectives(sweep: ZeroSweep, world_size: int | None = None, ax=None):
    """Collectives per training step on rank 0, by gloo event name, one group per strategy."""
    ax = style.new_axes(ax, figsize=(7, 3))
    world_size = world_size or max(sweep.world_sizes)
    rows = {s: sweep.rows(s, world_size)[0] for s in sweep.strategies if sweep.rows(s, world_size)}
    names = sorted({name for r in rows.values() for name in r.collectives})
    width = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        xs = [i + (j - (len(names) - 1) / 2) * width for i in range(len(rows))]
        counts = [r.collectives.get(name, 0) for r in rows.values()]
        ax.bar(xs, counts, width=width * 0.95, color=style.BUCKET_COLORS[j % len(style.BUCKET_COLORS)],
               label=name)
        for x, c, r in zip(xs, counts, rows.values()):
            if c:
                ax.text(x, c, f"{c}\n{r.collective_bytes.get(name, 0) / MB:.2f} MB", ha="center",
                        va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)), [STRATEGY_LABELS[s] for s in rows], fontsize=8)
    ax.set_ylabel("events in one step (rank 0)")
    ax.set_title(f"what gloo ran in one training step, N = {world_size} (count, input MB)", loc="left")
    ax.margins(y=0.3)
    style.tidy(ax)
    ax.legend(fontsize=8, frameon=False)
    style.tag(ax, "live")
    return ax


# --- the exercise's figure: yours beside the reference ------------------------------------

def plot_zero1_exercise(check: Zero1Check):
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

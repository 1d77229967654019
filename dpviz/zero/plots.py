"""ZeRO figures: the calculator's per-rank bytes by stage, and live shards against it."""
from __future__ import annotations

from .records import STAGES, ZeroSweep, model_for, zero_memory, K_MIXED
from ..plots import style
from ..memory.plots import PART_COLORS, PART_LABELS

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

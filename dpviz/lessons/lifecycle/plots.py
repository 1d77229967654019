"""The DDP lifecycle drawn: sampler shards, the construction broadcast, buffers (DP vs PS vs DDP:
`dpviz/lessons/dp_vs_ddp/plots.py`)."""
from __future__ import annotations

from matplotlib.colors import to_rgba
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from dpviz.lessons.lifecycle.records import BN_NET, Lifecycle, SamplerShards
from dpviz.plots import style
from dpviz.plots.legibility import contrast


def sampler_grid(shards: SamplerShards) -> list[list[list[int]]]:
    """grid[epoch][index] = the ranks that draw that index in that epoch (two when padded)."""
    grid = [[[] for _ in range(shards.dataset_size)] for _ in shards.shards]
    for e, epoch in enumerate(shards.shards):
        for rank, shard in enumerate(epoch):
            for i in shard:
                grid[e][i].append(rank)
    return grid


def plot_sampler(shards: SamplerShards, ax=None):
    """Dataset indices (columns) per epoch (rows), coloured by the rank that draws them."""
    grid = sampler_grid(shards)
    ax = style.new_axes(ax, figsize=(min(12, 1 + 0.45 * shards.dataset_size), 0.8 + 0.6 * len(grid)))
    for e, row in enumerate(grid):
        for i, ranks in enumerate(row):
            for k, rank in enumerate(ranks):  # a padded index is split between its ranks
                h = 0.9 / len(ranks)
                ax.add_patch(Rectangle((i, -e - 0.45 + k * h), 0.95, h, color=style.rank_color(rank)))
            if len(ranks) > 1:
                ax.text(i + 0.47, -e, "×2", ha="center", va="center", fontsize=7,   # on both ranks' halves
                        color=max((style.TEXT, "white"), key=lambda c: min(
                            contrast(to_rgba(c), to_rgba(style.rank_color(r))) for r in ranks)))
    ax.set_xlim(0, shards.dataset_size)
    ax.set_ylim(-len(grid) + 0.4, 0.6)
    ax.set_xticks([i + 0.47 for i in range(shards.dataset_size)], range(shards.dataset_size))
    ax.set_yticks([-e for e in range(len(grid))], [f"epoch {e}" for e in range(len(grid))])
    ax.set_xlabel("dataset index")
    ax.legend(handles=[Patch(color=style.rank_color(r), label=f"rank {r}")
                       for r in range(shards.world_size)],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_title(f"DistributedSampler, {shards.dataset_size} samples over {shards.world_size} ranks: "
                 f"{shards.padding()} index(es) drawn twice to even the shards", loc="left", fontsize=9)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    style.tag(ax, "live")
    return ax


def plot_construction(record: Lifecycle, ax=None):
    """A few weights of each rank before and right after `DDP(model)`."""
    ax = style.new_axes(ax, figsize=(8, 3))
    n = len(record.weights_before[0])
    for rank, (before, after) in enumerate(zip(record.weights_before, record.weights_after)):
        c = style.rank_color(rank)
        ax.plot(range(n), before, "o", color=c, mfc="none", label=f"rank {rank} before")
        ax.plot([n + 1 + i for i in range(n)], after, "o", color=c, ms=9 - 2 * rank,
                label=f"rank {rank} after")
    ax.axvline(n, color=style.MUTED, lw=1)
    ax.set_xticks([(n - 1) / 2, n + 1 + (n - 1) / 2], ["before DDP(model)", "after DDP(model)"])
    matrix = next((p.name for p in record.workload.params if len(p.shape) >= 2), None) \
        if record.workload else None
    ax.set_ylabel(f"first weights of {matrix or 'layer 1'}")
    buffers = (f"buffers {record.buffer_diff_before:.1f} → {record.buffer_diff_after:.0e}"
               if record.has_buffers else "no buffers")
    ax.set_title(f"max |θ_r − θ_0|: {record.param_diff_before:.2f} before, "
                 f"{record.param_diff_after:.0e} after; {buffers}", loc="left", fontsize=9)
    ax.legend(fontsize=7, frameon=False, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_buffers(record: Lifecycle, ax=None):
    """Each rank's BatchNorm running mean after every step; rank r's data has mean r·shift."""
    ax = style.new_axes(ax, figsize=(6, 3))
    name = record.workload.name if record.workload else BN_NET
    if not any(record.running_mean):                   # the run found no BatchNorm layer
        ax.set_title(f"{name}: no BatchNorm, no running statistics", loc="left")
        style.tag(ax, "live")
        return ax
    for rank, values in enumerate(record.running_mean):
        ax.plot(range(1, len(values) + 1), values, color=style.rank_color(rank), label=f"rank {rank}")
        if record.workload is None or record.workload.name == BN_NET:  # BatchNorm on the inputs
            ax.axhline(rank * record.data_shift, color=style.rank_color(rank), ls=":", lw=0.8)
    ax.set(xlabel="step", ylabel="running mean (avg over features)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # steps are whole: no 2.5, 7.5 ticks
    ax.set_title(f"{name}, forward_sync_buffers={record.forward_sync_buffers}", loc="left")
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax

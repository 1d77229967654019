"""The DDP lifecycle drawn: sampler shards, the construction broadcast, buffers, DP vs DDP."""
from __future__ import annotations

from matplotlib.patches import Patch, Rectangle

from ..dp_vs_ddp import DpVsDdp, expected_sent_bytes
from ..lifecycle import Lifecycle, SamplerShards
from . import style


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
                ax.text(i + 0.47, -e, "×2", ha="center", va="center", fontsize=7, color="white")
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
    ax.set_ylabel("first weights of layer 1")
    ax.set_title(f"max |θ_r − θ_0|: {record.param_diff_before:.2f} before, "
                 f"{record.param_diff_after:.0e} after; buffers {record.buffer_diff_before:.1f} → "
                 f"{record.buffer_diff_after:.0e}", loc="left", fontsize=9)
    ax.legend(fontsize=7, frameon=False, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    style.tidy(ax)
    return ax


def plot_buffers(record: Lifecycle, ax=None):
    """Each rank's BatchNorm running mean after every step; rank r's data has mean r·shift."""
    ax = style.new_axes(ax, figsize=(6, 3))
    for rank, values in enumerate(record.running_mean):
        ax.plot(range(1, len(values) + 1), values, color=style.rank_color(rank), label=f"rank {rank}")
        ax.axhline(rank * record.data_shift, color=style.rank_color(rank), ls=":", lw=0.8)
    ax.set(xlabel="step", ylabel="running mean (avg over features)")
    ax.set_title(f"forward_sync_buffers={record.forward_sync_buffers}", loc="left")
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    return ax


def plot_traffic(record: DpVsDdp, ax=None):
    """Bytes each rank sends per step, measured (bars) and modelled (ticks), per world size."""
    ax = style.new_axes(ax, figsize=(9, 3.5))
    x, ticks, labels = 0.0, [], []
    for n in sorted({p.world_size for p in record.points}):
        for pattern, color in (("dp", "#D55E00"), ("ddp", "#0072B2")):
            for p in sorted(record.of(pattern, n), key=lambda p: p.rank):
                ax.bar(x, p.sent_bytes / 2 ** 20, color=color, width=0.8)
                model = expected_sent_bytes(pattern, n, p.rank, record.param_bytes) / 2 ** 20
                ax.plot([x - 0.4, x + 0.4], [model, model], color="black", lw=1)
                ticks.append(x)
                labels.append(f"N={n}\nr{p.rank}" if p.rank == 0 else f"r{p.rank}")
                x += 1
            x += 0.5
        x += 1
    ax.set_xticks(ticks, labels, fontsize=7)
    ax.set_ylabel("MiB sent per step")
    ax.legend(handles=[Patch(color="#D55E00", label="DP: gather to rank 0, update, send back"),
                       Patch(color="#0072B2", label="DDP: all-reduce"),
                       Patch(color="black", label="model: (N−1)·P at rank 0 / 2(N−1)/N·P")],
              fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.08), ncol=3)
    ax.set_title(f"P = {record.param_bytes / 2 ** 20:.1f} MiB of parameters; world sizes "
                 f"{sorted({p.world_size for p in record.points})} left to right", loc="left",
                 fontsize=9, pad=4)
    style.tidy(ax)
    return ax


def plot_step_time(record: DpVsDdp, ax=None):
    """Median step time against world size (slowest rank: everyone waits for it)."""
    ax = style.new_axes(ax, figsize=(5, 3.5))
    sizes = sorted({p.world_size for p in record.points})
    for pattern, color, label in (("dp", "#D55E00", "DP pattern"), ("ddp", "#0072B2", "DDP")):
        ax.plot(sizes, [max(p.step_ms for p in record.of(pattern, n)) for n in sizes], "o-",
                color=color, label=label)
    ax.set(xlabel="world size (ranks)", ylabel="step time, ms (slowest rank)", xticks=sizes)
    ax.set_title("same batch per rank (weak scaling)", loc="left", fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    return ax

"""The DDP lifecycle drawn: sampler shards, the construction broadcast, buffers; DP vs PS vs DDP."""
from __future__ import annotations

from matplotlib.patches import Patch, Rectangle

from ..dp_vs_ddp import DP_PHASES, RANK_PATTERNS, DpVsDdp, expected_copy_bytes, expected_sent_bytes
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
    ax.set_ylabel("first weights of layer 1")
    ax.set_title(f"max |θ_r − θ_0|: {record.param_diff_before:.2f} before, "
                 f"{record.param_diff_after:.0e} after; buffers {record.buffer_diff_before:.1f} → "
                 f"{record.buffer_diff_after:.0e}", loc="left", fontsize=9)
    ax.legend(fontsize=7, frameon=False, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    style.tidy(ax)
    style.tag(ax, "live")
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
    style.tag(ax, "live")
    return ax


COLORS = {"dp": "#009E73", "ps": "#D55E00", "ddp": "#0072B2"}
LABELS = {"dp": "single-process DP (one process, N threads)",
          "ps": "parameter server on ranks", "ddp": "DDP all-reduce"}


def plot_traffic(record: DpVsDdp, ax=None):
    """Bytes per step through each worker, measured (bars) and modelled (ticks), per N.

    Single-process DP: what device 0 copies out (input shards, parameters, output gradients)
    and in (outputs, parameter gradients); the
    rank patterns: what each rank writes to its sockets.
    """
    ax = style.new_axes(ax, figsize=(10, 3.5))
    x, ticks, labels = 0.0, [], []

    def bar(value, model, color, label, hatch=None):
        nonlocal x
        ax.bar(x, value / 2 ** 20, color=color, width=0.8, hatch=hatch, edgecolor="white")
        ax.plot([x - 0.4, x + 0.4], [model / 2 ** 20] * 2, color="black", lw=1)
        ticks.append(x)
        labels.append(label)
        x += 1

    sizes = sorted({p.world_size for p in record.points})
    for n in sizes:
        first = x
        if any(d.replicas == n for d in record.single_process):
            dev, model = record.dp(n), expected_copy_bytes(n, record.param_bytes, record.shard_bytes,
                                                         record.output_bytes)
            bar(dev.bytes_out, model["out"], COLORS["dp"], "d0\nout")
            bar(dev.bytes_in, model["in"], COLORS["dp"], "d0\nin", hatch="//")
            x += 0.5
        for pattern in RANK_PATTERNS:
            for p in sorted(record.of(pattern, n), key=lambda p: p.rank):
                bar(p.sent_bytes, expected_sent_bytes(pattern, n, p.rank, record.param_bytes),
                    COLORS[pattern], f"r{p.rank}")
            x += 0.5
        ax.annotate(f"N = {n}", ((first + x - 1.5) / 2, 0), xycoords=("data", "axes fraction"),
                    xytext=(0, -26), textcoords="offset points", ha="center", va="top",
                    fontsize=8)
        x += 1
    ax.set_xticks(ticks, labels, fontsize=7)
    ax.set_ylabel("MiB per step")
    ax.legend(handles=[Patch(color=COLORS["dp"], label="DP: device 0 copies out / in (hatched)"),
                       Patch(color=COLORS["ps"], label="parameter server: rank sends"),
                       Patch(color=COLORS["ddp"], label="DDP: rank sends"),
                       Patch(color="black", label="model")],
              fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.08), ncol=2)  # the source tag sits right
    ax.set_title(f"P = {record.param_bytes / 2 ** 20:.1f} MiB of parameters; d0 = DP's device 0,"
                 f" r = rank", loc="left", fontsize=9, pad=4)
    style.tidy(ax)
    style.tag(ax, "live", "model")
    return ax


def plot_step_time(record: DpVsDdp, ax=None):
    """Median step time against N: replicas in one process, or ranks (slowest rank)."""
    ax = style.new_axes(ax, figsize=(5, 3.5))
    dev = sorted(record.single_process, key=lambda d: d.replicas)
    if dev:
        ax.plot([d.replicas for d in dev], [d.step_ms for d in dev], "o-", color=COLORS["dp"],
                label="single-process DP")
    sizes = sorted({p.world_size for p in record.points})
    for pattern in RANK_PATTERNS:
        ax.plot(sizes, [max(p.step_ms for p in record.of(pattern, n)) for n in sizes], "o-",
                color=COLORS[pattern], label=LABELS[pattern])
    ax.set(xlabel="N (replicas or ranks)", ylabel="step time, ms",
           xticks=sorted(set(sizes) | {d.replicas for d in dev}))
    ax.set_title("same batch per worker (weak scaling)", loc="left", fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_dp_phases(record: DpVsDdp, ax=None):
    """Single-process DP's step split into phases: only the forwards run on N threads."""
    ax = style.new_axes(ax, figsize=(5, 3.5))
    dev = sorted(record.single_process, key=lambda d: d.replicas)
    colors = dict(zip(DP_PHASES, ("#E69F00", COLORS["dp"], "#CC79A7", "#D55E00", "#56B4E9")))
    for d in dev:
        bottom = 0.0
        for phase in DP_PHASES:
            ax.bar(d.replicas, d.phase_ms[phase], bottom=bottom, color=colors[phase], width=0.6)
            bottom += d.phase_ms[phase]
        ax.text(d.replicas, bottom, f"{d.threads} thr\n×{d.overlap:.1f}", ha="center",
                va="bottom", fontsize=7)
    ax.margins(y=0.15)
    ax.set(xlabel="replicas N (one process)", ylabel="ms per step (medians)",
           xticks=[d.replicas for d in dev])
    where = {"parallel_forward": " (N threads)", "backward": " (1 thread on CPU)"}
    ax.legend(handles=[Patch(color=colors[p], label=p + where.get(p, " (device 0)")) for p in DP_PHASES],
              fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("×: Σ replica forward time / parallel wall (1 = serial)", loc="left", fontsize=9)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax

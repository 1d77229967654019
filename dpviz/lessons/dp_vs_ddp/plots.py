"""DP vs parameter server vs DDP drawn: bytes per step through each worker, step time against N,
and single-process DP's step split into phases."""
from __future__ import annotations

from matplotlib.patches import Patch

from dpviz.lessons.dp_vs_ddp.records import (
    DP_PHASES, DpVsDdp, RANK_PATTERNS, expected_copy_bytes, expected_sent_bytes,
)
from dpviz.plots import style

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


def plot_dp_vs_ddp(record: DpVsDdp):
    """The three panels in one figure a notebook column wide, so no type is scaled down: the
    traffic across the top (one bar per worker and N needs the width), step time and DP's
    phases below it. Returns the Figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplot_mosaic([["traffic", "traffic"], ["time", "phases"]], layout="constrained",
                                   figsize=(style.COLUMN_IN, 7.4), height_ratios=(1.1, 1))
    plot_traffic(record, axes["traffic"])
    plot_step_time(record, axes["time"])
    plot_dp_phases(record, axes["phases"])
    return fig

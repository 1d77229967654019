"""Figures of collectives, drawn from records: primitive grids, algorithm steps, traffic,
bandwidth against the alpha-beta model.

A grid is rank × element. A cell's stripes are the colours of the ranks whose inputs its
value contains (one stripe: a copy of one rank's data; every colour: the full sum), so the
same picture reads for a broadcast, a gather or step 3 of a ring.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from matplotlib import patheffects
from matplotlib.collections import PatchCollection
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from dpviz.core.link import describe_link
from dpviz.lessons.collectives.bandwidth import BenchRecord, fit_alpha_beta, shape_of
from dpviz.lessons.collectives.record import (
    CollectiveRecord, PrimitivesRecord, RingCheck, RingRun, Transfer,
)
from dpviz.lessons.collectives.schedule import holds_per_step
from dpviz.plots import style
from dpviz.plots.legibility import place_labels
from dpviz.plots.style import COLUMN_IN, WRONG

PHASE_TEXT = {
    "reduce_scatter": "each rank sends one chunk to its right neighbour, which adds it",
    "all_gather": "each rank passes a finished chunk right; the receiver overwrites its copy",
    "reduce": "partial sums travel toward the receivers, which add them",
    "broadcast": "the finished sum is copied to ranks that lack it",
}
# Seed 000 §2.4 (nccl-tests on 4×V100, NVLink, no NVSwitch): context for our CPU numbers.
# Seed 000's figures for 4×V100. Its two small-message bounds disagree: §2.4 says under 30 GB/s
# below 1 MB, §4.1 under a tenth of the 150 GB/s peak (15 GB/s): both are drawn, as quoted.
SEED_V100_BUSBW = (("4×V100 NVLink, 128 MB (seed §2.4)", 130.0),
                   ("4×V100 NVLink, < 1 MB: under 30 (seed §2.4)", 30.0),
                   ("< 1 MB: under 1/10 of 150 (seed §4.1; disagrees with §2.4)", 15.0),
                   ("4×V100 without NVLink (seed §2.4)", 10.0))


# --- prepare ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Frame:
    """What the grid shows at one point of a recorded algorithm."""

    index: int                                   # 0: the inputs; i: after step i−1
    title: str
    values: tuple[tuple[float, ...], ...]        # rank → element values
    holds: tuple[tuple[tuple[int, ...], ...], ...]  # rank → element → ranks summed in it
    transfers: tuple[Transfer, ...]              # the messages that produced this frame


def collective_frames(record: CollectiveRecord) -> list[Frame]:
    """The inputs, then the state after every step, with per-element contributors."""
    states = holds_per_step(record)
    sizes = [stop - start for start, stop in record.chunks]
    n = len(record.steps)

    def per_element(holds) -> tuple:
        return tuple(tuple(tuple(sorted(h)) for h, size in zip(rank, sizes) for _ in range(size))
                     for rank in holds)

    frames = [Frame(0, f"{record.algorithm}: inputs, one row per rank", record.inputs,
                    per_element(states[0]), ())]
    for step, holds in zip(record.steps, states[1:]):
        values = tuple(tuple(v for chunk in rank for v in chunk) for rank in step.values)
        title = f"{record.algorithm} step {step.index + 1}/{n} · {step.phase}: {PHASE_TEXT[step.phase]}"
        frames.append(Frame(step.index + 1, title, values, per_element(holds), step.transfers))
    return frames


def traffic_table(records: Sequence[CollectiveRecord]) -> list[dict]:
    """Per algorithm: steps, max and mean bytes sent per rank, both in units of S."""
    rows = []
    for r in records:
        sent = [b / r.total_bytes for b in r.bytes_sent_per_rank]
        rows.append(dict(algorithm=r.algorithm, world_size=r.world_size, steps=len(r.steps),
                         max_per_S=max(sent), mean_per_S=sum(sent) / len(sent)))
    return rows


# --- draw ---------------------------------------------------------------------------------

# A message's arrow bends across the rows between sender and receiver, over other cells: the
# values are drawn above the arrows with a white halo, so an arrow never hides a number.
ARROW_ZORDER, VALUE_ZORDER = 5, 6
VALUE_HALO = [patheffects.withStroke(linewidth=2.5, foreground="white")]


def draw_grid(ax, x0: float, rows: Sequence[Sequence[float]], holds, n_ranks: int,
               bounds: Sequence[int] = (), fontsize: float = 7) -> None:
    """Cells of width 1 from x0; row 0 (rank 0) on top. Chunk borders at `bounds`; the values
    in `fontsize` pt (larger where the cells leave room).

    All stripes go into one PatchCollection: a ring figure has thousands of them.
    """
    stripes, colors = [], []
    for rank, (values, sources) in enumerate(zip(rows, holds)):
        y = n_ranks - 1 - rank
        if not values:
            ax.text(x0 + 0.1, y + 0.5, "(no tensor)", va="center", fontsize=8, color=style.MUTED)
        for i, (value, ranks) in enumerate(zip(values, sources)):
            width = 1 / max(1, len(ranks))
            for k, src in enumerate(ranks):
                stripes.append(Rectangle((x0 + i + k * width, y), width, 1))
                colors.append(style.rank_color(src))
            ax.text(x0 + i + 0.5, y + 0.5, f"{value:g}", ha="center", va="center", fontsize=fontsize,
                    color=style.TEXT, zorder=VALUE_ZORDER, path_effects=VALUE_HALO)
    ax.add_collection(PatchCollection(stripes, facecolors=colors, alpha=0.5, linewidths=0))
    cells = [Rectangle((x0 + i, n_ranks - 1 - r), 1, 1) for r, values in enumerate(rows) for i in range(len(values))]
    ax.add_collection(PatchCollection(cells, facecolors="none", edgecolors="white", linewidths=1))
    for b in bounds:
        ax.plot([x0 + b, x0 + b], [0, n_ranks], color=style.TEXT, linewidth=1.5)


def input_sources(*holds) -> set[int]:
    """Every rank whose input some cell of these grids holds (`draw_grid`'s `holds`)."""
    return {src for grid in holds for rank in grid for cell in rank for src in cell}


def rank_axis(ax, n_ranks: int, width: float) -> None:
    """One row per rank, rank 0 on top, over `width` cells."""
    ax.set_yticks([n_ranks - 1 - r + 0.5 for r in range(n_ranks)], [f"rank {r}" for r in range(n_ranks)])
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-0.1, n_ranks + 0.1)
    ax.set_xticks([])
    ax.spines[:].set_visible(False)


def inputs_legend(ax, ranks: Iterable[int]) -> None:
    """Whose input each colour is: a cell is striped with the ranks whose inputs it holds. Only
    `ranks`, those whose inputs the figure draws: a scatter's all come from its root."""
    handles = [Patch(color=style.rank_color(r), alpha=0.55, label=f"rank {r}'s input") for r in sorted(set(ranks))]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def plot_primitive(record: PrimitivesRecord, name: str, ax=None):
    """One primitive: every rank's tensor before (left) and after (right)."""
    run = record.get(name)
    if name == "barrier":
        return plot_barrier(record, ax)
    n = record.world_size
    left = max(len(v) for v in run.before)
    right = max(len(v) for v in run.after)
    # no wider than a notebook column: a wider figure is shown scaled down, its numbers with it
    ax = style.new_axes(ax, figsize=(min(style.COLUMN_IN, 2 + 0.42 * (left + right + 2)), 0.5 + 0.45 * n))
    draw_grid(ax, 0, run.before, run.before_from, n, fontsize=8)   # a cell holds three digits at 8 pt
    draw_grid(ax, left + 2, run.after, run.after_from, n, fontsize=8)
    ax.annotate("", xy=(left + 1.8, n / 2), xytext=(left + 0.2, n / 2),
                arrowprops=dict(arrowstyle="->", color=style.TEXT, lw=1.5))
    ax.text(left / 2, n + 0.15, "before", ha="center", fontsize=9)
    ax.text(left + 2 + right / 2, n + 0.15, "after", ha="center", fontsize=9)
    rank_axis(ax, n, left + right + 2)
    ax.set_ylim(-0.1, n + 0.6)
    root = "" if run.root is None else f" (root = rank {run.root})"
    ax.set_title(f"{name}{root}", loc="left")
    inputs_legend(ax, input_sources(run.before_from, run.after_from))
    style.tag(ax, "live")
    return ax


def plot_barrier(record: PrimitivesRecord, ax=None):
    """Each rank works r × 50 ms, then waits at the barrier until the last one arrives."""
    run = record.get("barrier")
    n = record.world_size
    ax = style.new_axes(ax, figsize=(8, 0.6 + 0.4 * n))
    for rank, (arrive, leave) in enumerate(zip(run.arrive_ms, run.leave_ms)):
        y = n - 1 - rank
        ax.barh(y, arrive, color=style.rank_color(rank), alpha=0.55, label="working" if rank == 0 else None)
        ax.barh(y, leave - arrive, left=arrive, color=style.MUTED, alpha=0.5,
                label="waiting in barrier" if rank == 0 else None)
    ax.axvline(max(run.arrive_ms), color=style.TEXT, linestyle=":", linewidth=1)
    ax.set_yticks(range(n), [f"rank {n - 1 - y}" for y in range(n)])
    ax.set_xlabel("ms since a common start")
    ax.set_title(f"barrier: every rank leaves within {max(run.leave_ms) - max(run.arrive_ms):.1f} ms "
                 "of the last arrival", loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def _draw_transfers(ax, transfers: Sequence[Transfer], chunks, n_ranks: int) -> None:
    """An arrow per message, from the sender's chunk to the receiver's, in the sender's colour."""
    for t in transfers:
        start, stop = chunks[t.chunk]
        x = (start + stop) / 2
        y_src, y_dst = n_ranks - 1 - t.src + 0.5, n_ranks - 1 - t.dst + 0.5
        ax.add_patch(FancyArrowPatch((x - 0.15, y_src), (x + 0.15, y_dst), arrowstyle="-|>",
                                     mutation_scale=12, color=style.rank_color(t.src), linewidth=1.8,
                                     connectionstyle="arc3,rad=-0.35", alpha=0.9, zorder=ARROW_ZORDER))


def plot_collective_step(record: CollectiveRecord, index: int, ax=None, legend: bool = True):
    """Frame `index` (0 = inputs) of a recorded algorithm, with the messages that made it."""
    frames = collective_frames(record)
    if not 0 <= index < len(frames):
        raise ValueError(f"frame {index} is not in this record (0 to {len(frames) - 1})")
    frame, n = frames[index], record.world_size
    ax = style.new_axes(ax, figsize=(2 + 0.5 * record.elements, 0.8 + 0.55 * n))
    bounds = [start for start, _ in record.chunks[1:]]
    draw_grid(ax, 0, frame.values, frame.holds, n, bounds)
    _draw_transfers(ax, frame.transfers, record.chunks, n)
    rank_axis(ax, n, record.elements)
    if len(record.chunks) > 1:
        ax.set_xticks([(a + b) / 2 for a, b in record.chunks], [f"chunk {c}" for c in range(len(record.chunks))])
        ax.tick_params(axis="x", length=0, labelsize=8)
    ax.set_title(frame.title, loc="left", fontsize=9)
    if legend:
        inputs_legend(ax, input_sources(frame.holds))
    style.tag(ax, "live")
    return ax


def plot_collective_steps(record: CollectiveRecord):
    """Every frame of a recorded algorithm stacked top to bottom; returns the Figure."""
    import matplotlib.pyplot as plt

    frames = collective_frames(record)
    fig, axes = plt.subplots(len(frames), 1, layout="constrained",
                             figsize=(2.5 + 0.5 * record.elements, len(frames) * (0.7 + 0.45 * record.world_size)))
    for i, ax in enumerate(axes):
        plot_collective_step(record, i, ax, legend=i == 0)
    return fig


def plot_traffic(records: Sequence[CollectiveRecord], ax=None):
    """Bytes each rank sent, in units of S, per algorithm (grouped bars, one per rank)."""
    n = records[0].world_size
    ax = style.new_axes(ax, figsize=(8, 3.2))
    width = 0.8 / n
    for i, record in enumerate(records):
        for rank, sent in enumerate(record.bytes_sent_per_rank):
            ax.bar(i + (rank - (n - 1) / 2) * width, sent / record.total_bytes, width,
                   color=style.rank_color(rank), label=f"rank {rank}" if i == 0 else None)
    ax.axhline(2 * (n - 1) / n, color=style.TEXT, linestyle="--", linewidth=1)
    ax.text(len(records) - 0.5, 2 * (n - 1) / n, " 2(N−1)/N", va="bottom", ha="right", fontsize=8,
            bbox=dict(boxstyle="square,pad=0.1", fc=style.BACKGROUND, ec="none"))   # reads over the bars
    ax.set_xticks(range(len(records)), [f"{r.algorithm}\n{len(r.steps)} steps" for r in records])
    ax.set_ylabel("bytes sent / S")
    ax.set_title(f"traffic per rank, {n} ranks, measured on live ranks (S = one rank's buffer)", loc="left")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def _series(record: BenchRecord, ops, world_size):
    return [(op, n) for op, n in record.series
            if (ops is None or op in ops) and (world_size is None or n == world_size)]


def _series_style(i: int) -> dict:
    return dict(color=style.BUCKET_COLORS[i % len(style.BUCKET_COLORS)], marker="os^vD<>p"[i % 8])


def plot_alpha_beta(record: BenchRecord, ax=None, ops=None, world_size=None):
    """Median time vs size (log-log) with the fitted t = α + n·β and its knee n = α/β."""
    ax = style.new_axes(ax, figsize=(8, 4))
    for i, (op, n) in enumerate(_series(record, ops, world_size)):
        rows = record.select(op, n)
        fit = fit_alpha_beta(rows)
        kw = _series_style(i)
        sizes = [r.bytes for r in rows]
        bandwidth = ("∞: flat, latency-bound at these sizes" if fit.beta_ms_per_byte == 0
                     else f"{fit.bandwidth_gbps:.2f} GB/s")
        ax.plot(sizes, [r.time_ms for r in rows], linestyle="none", markersize=5, **kw,
                label=f"{op}, {n} ranks: α={fit.alpha_ms:.2f} ms, 1/β={bandwidth}")
        grid = [min(sizes) * (max(sizes) / min(sizes)) ** (k / 60) for k in range(61)]
        ax.plot(grid, [fit.time_ms(s) for s in grid], color=kw["color"], linewidth=1.2, alpha=0.8)
        if min(sizes) <= fit.knee_bytes <= max(sizes):
            ax.axvline(fit.knee_bytes, color=kw["color"], linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("time (ms, median)")
    ax.set_title("measured (points) vs alpha-beta model (lines); dotted: knee α/β\n"
                 f"{describe_link(record.link)}", loc="left", fontsize=9)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    style.tag(ax, "live", "model")
    return ax


def busbw_title(record: BenchRecord, op: str = "all_reduce") -> str:
    """The busBW figure's title: the shape `describe_shape` prints for this run's `op` series,
    never a typed one (the quoted seed curves beside it have the shape; a loopback run may not)."""
    if len({r.bytes for r in record.select(op)}) < 6:
        return "bus bandwidth against message size"
    shape = shape_of(record, op)
    return (f"{op}'s bus bandwidth grows with message size, then levels off" if not shape.breaks
            else f"{op}'s bus bandwidth: not the alpha-beta shape on this run\n({'; '.join(shape.breaks)})")


def plot_busbw(record: BenchRecord, ax=None, ops=None, world_size=None, seed_context: bool = True):
    """busBW vs size on log axes; the seed's V100 figures as dashed reference lines."""
    ax = style.new_axes(ax, figsize=(8, 4))
    for i, (op, n) in enumerate(_series(record, ops, world_size)):
        rows = record.select(op, n)
        ax.plot([r.bytes for r in rows], [r.busbw_gbps for r in rows], linewidth=1.2,
                label=f"{op}, {n} ranks (gloo, CPU)", **_series_style(i))
    handles, _ = ax.get_legend_handles_labels()
    if seed_context:
        seed_labels = []
        for label, gbps in SEED_V100_BUSBW:
            ax.axhline(gbps, color=style.MUTED, linestyle="--", linewidth=1)
            seed_labels.append(ax.text(0.01, gbps * 1.08, label, fontsize=7, color=style.MUTED,
                                       transform=ax.get_yaxis_transform()))  # x in axes units, y in GB/s
        handles.append(Line2D([], [], color=style.MUTED, linestyle="--", label="seed 000 §2.4, for context"))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("busBW (GB/s)")
    ax.set_title(busbw_title(record), loc="left")
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="lower right")
    style.tag(ax, "live", *(["quoted"] if seed_context else []))
    if seed_context:   # lines close in GB/s: slide a label along its line rather than stack them
        place_labels(seed_labels, "a quoted line's label with no free place beside it",
                     shifts_pt=((0, 0), (0, -10), (250, 0)))
    return ax


# --- the exercise's figure: yours beside the reference ------------------------------------

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
                                     linewidth=1.8, connectionstyle="arc3,rad=-0.35", zorder=ARROW_ZORDER,
                                     linestyle="-" if send.start is not None else "--"))
    rank_axis(ax, n, run.elements)
    steps = max(run.steps_per_rank)
    ax.set_title(f"{title}: {'inputs' if k == 0 else f'after step {k} of {steps}'}\n"
                 f"bytes sent per rank {list(run.bytes_sent_per_rank)}", loc="left", fontsize=9)


def plot_ring_exercise(check: RingCheck):
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
    inputs_legend(axes[1], range(n))   # inputs 8^rank: every rank's
    style.tag(axes[0], "live")
    style.tag(axes[1], "model")
    fig.suptitle(check.verdict.message.split(":")[0], x=0.01, ha="left", fontsize=10)
    return fig

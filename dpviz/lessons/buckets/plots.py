"""Figures of DDP's gradient buckets: their layout, one step's timeline, the cap sweep.

Data comes from `dpviz.lessons.buckets.records` (pure functions of records); these functions only draw.
"""
from __future__ import annotations

from matplotlib.patches import Patch
from matplotlib.transforms import offset_copy

from dpviz.analysis.overlap import steady_steps
from dpviz.analysis.stragglers import exposed_split
from dpviz.core.bucket_layout import cap_limits
from dpviz.core.link import link_note
from dpviz.core.record import RunRecord
from dpviz.lessons.buckets.records import (
    BucketSweep, BucketsCheck, BucketTiming, StepTimeline, cap_label, gradients, notable_gradients, step_buckets,
    step_timeline,
)
from dpviz.plots import style
from dpviz.plots.bars import hbars, link_bars, stacked_rows
from dpviz.plots.legends import kept_legend
from dpviz.plots.legibility import place_labels, readable_on


EXPOSED_COLOR = "#D62728"
MODEL_GID = "alpha-beta prediction"   # the timeline's outlines of the model's all-reduce times


def _short(names: tuple[str, ...]) -> str:
    """'16.bias … 12.weight' for a bucket's parameters (ready order)."""
    return names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}"


def plot_layout(record: RunRecord, ax=None, rank: int = 0):
    """Iteration 0's single bucket above the rebuilt buckets, gradients in ready order.

    Each bar is one bucket, as wide as its bytes; the dashed lines mark where the caps
    close a bucket (the first bucket may have its own, smaller cap).
    """
    ax = style.new_axes(ax, figsize=(10, 2.6))
    first, steady = record.steps[0], steady_steps(record)[-1]
    rows = [(f"step {first} (iteration 0)", step_buckets(record, first, rank)),
            (f"step {steady} (rebuilt)", step_buckets(record, steady, rank))]
    labels = []
    for y, (label, buckets) in enumerate(reversed(rows)):
        left = 0.0
        for b in buckets:
            width = b.bytes / 2**20
            ax.barh(y, width, left=left, color=style.bucket_color(b.index), edgecolor="white")
            text = f"b{b.index}: {len(b.params)} params, {width:.2f} MiB"
            if len(buckets) <= 4:
                text += f"\n{_short(b.params)}"
            elif len(buckets) > 8:
                text = f"b{b.index}"   # the y label gives the count; sizes show as widths
            labels.append(ax.text(left + width / 2, y, text, ha="center", va="center", fontsize=7,
                                  color=readable_on(style.bucket_color(b.index), dark=style.TEXT)))
            left += width
    limits = cap_limits(record.config.get("bucket_cap_mb"))
    ax.axvline(limits[0] / 2**20, color=style.MUTED, ls="--", lw=1)
    ax.set_yticks(range(len(rows)), [f"{label}: {len(b)} bucket{'s' * (len(b) > 1)}"
                                     for label, b in reversed(rows)])
    ax.set_xlabel("gradient bytes in the order DDP packs them (MiB)")
    cap = record.config.get("bucket_cap_mb")
    ax.set_title(f"rank {rank}: DDP's buckets (bucket_cap_mb={cap}; dashed: first bucket's cap "
                 f"{limits[0] / 2**20:g} MiB)", loc="left")
    style.tidy(ax)
    style.tag(ax, style.source_of(record))
    place_labels(labels, "a bucket too narrow for its label: its width is its size",
                 shifts_pt=((0, 0), (0, 7), (0, -7)))
    return ax


# Bucket-ready labels close in time are stacked upwards (into the compute lane, above the
# tick) before one is hidden; a hidden one keeps its tick, in its bucket's colour.
READY_SHIFTS = ((0, 0), (0, -8), (-9, 0), (9, 0))   # never onto a bar (place_labels avoid_bars)
READY_WHY = "bucket ready within a label's width of 2 others: its tick and colour remain"


# A name's places (pt from just above its bar's top), each within a few font heights of its own
# bar (legibility.FLOAT_HEIGHTS): stacked higher, a name sat beside another bar, or beside none.
NAME_SHIFTS = ((0, 0), (0, 12), (-18, 0), (18, 0), (-18, 12), (18, 12))


def plot_gradient_sizes(record: RunRecord, ax=None, rank: int = 0, label_top: int = 3):
    """Each gradient's bytes (log scale) in the order DDP packs them, coloured by bucket;
    the largest few and the smallest are named. A transformer's embeddings stand out next
    to its LayerNorms' few hundred bytes; an MLP's layers are all alike."""
    grads = gradients(record, rank)
    ax = style.new_axes(ax, figsize=(10, 3.2))
    ax.bar([g.position for g in grads], [g.bytes for g in grads], width=0.9,
           color=[style.bucket_color(g.bucket) for g in grads])
    ax.set_yscale("log")
    ax.set_ylim(top=max(g.bytes for g in grads) * 12)     # room for the names
    largest, smallest = notable_gradients(grads, label_top)   # as describe_gradients names them
    edge = max(1, len(grads) // 8)   # names near an end grow inwards, off the axis and its ticks
    above = offset_copy(ax.transData, fig=ax.figure, y=3, units="points")   # place_labels can move a Text
    labels = [ax.text(g.position, g.bytes, g.name, transform=above, va="bottom", fontsize=8, color=style.TEXT,
                      ha="left" if g.position < edge else "right" if g.position >= len(grads) - edge else "center")
              for g in dict.fromkeys(largest + [smallest])]
    ax.set_xlabel("gradients in the order DDP packs them (ready order); colour = bucket")
    ax.set_ylabel("bytes")
    name = record.workload.name if record.workload else "mlp"
    ax.set_title(f"{name}: {len(grads)} gradients in {grads[-1].bucket + 1} bucket(s) "
                 f"(bucket_cap_mb={record.config.get('bucket_cap_mb')})", loc="left")
    style.tidy(ax)
    style.tag(ax, style.source_of(record))
    place_labels(labels, "no room for the name beside its own bar (a larger gradient's name or a taller "
                 "neighbour there): the printed lines name it", shifts_pt=NAME_SHIFTS, avoid_bars=True)
    return ax


def _draw_ranks(ax, lanes: list[tuple[StepTimeline, float]], model) -> list:
    """Three lanes per rank (main thread, bucket readiness, communication), at each rank's
    base. One collection per kind of mark for every rank, coloured bar by bar: a 24-bucket
    step on 2 ranks draws a few artists, not 150 (each costs about the same to make, add and
    draw, however small). Returns the bucket-ready labels."""
    main, comm = (lambda base: base + 2.0), (lambda base: base + 0.25)   # a lane's bottom
    ops = [(kind, op, base) for tl, base in lanes for kind in ("forward", "backward", "optimizer")
           for op in getattr(tl, kind)]
    hbars(ax, [(s, e - s) for _, (s, e), _ in ops], [(main(base), 0.8) for *_, base in ops],
          facecolors=[style.kind_color(kind) for kind, *_ in ops])
    waits = [(tl, base) for tl, base in lanes if tl.wait_ms > 0]
    if waits:   # backward is done; the step cannot go on until the last bucket is reduced
        hbars(ax, [(tl.backward_end_ms, tl.comm_end_ms - tl.backward_end_ms) for tl, _ in waits],
              [(main(base), 0.8) for _, base in waits], facecolors="none", edgecolor=style.MUTED,
              hatch="///", linewidth=0)
    buckets = [(b, base) for tl, base in lanes for b in tl.buckets]
    colors = [style.bucket_color(b.index) for b, _ in buckets]
    rows = _comm_rows(buckets, comm)
    linked = [(b, row) for (b, _), row in zip(buckets, rows) if b.link_start_ms is not None]
    if linked:   # the emulated wire's transfers: waiting, no CPU (each before its all-reduce)
        link_bars(ax, [(b.link_start_ms, b.link_end_ms - b.link_start_ms) for b, _ in linked],
                  [row for _, row in linked], [style.bucket_color(b.index) for b, _ in linked])
    hbars(ax, [(b.start_ms, b.end_ms - b.start_ms) for b, _ in buckets], rows,
          facecolors=colors, edgecolor="white", lw=0.3)
    ready = [base + 1.5 for _, base in buckets]   # ticks up to the main lane, labels under them
    ax.vlines([b.ready_ms for b, _ in buckets], ready, [y + 0.45 for y in ready], colors=colors, lw=2)
    labels = [ax.text(b.ready_ms, y - 0.05, f"b{b.index}", fontsize=8, ha="center", va="top", color=color)
              for (b, _), y, color in zip(buckets, ready, colors)]
    if model is not None:  # the model's duration of each all-reduce, drawn from the same start
        hbars(ax, [(b.comm_start_ms, model.time_ms(b.bytes)) for b, _ in buckets],
              rows, facecolors="none", edgecolor=style.TEXT,
              linestyle=":", linewidth=1, gid=MODEL_GID)
    exposed = [((s, e - s), base) for tl, base in lanes for s, e in tl.exposed]
    hbars(ax, [x for x, _ in exposed], [(base, 0.18) for _, base in exposed], facecolors=EXPOSED_COLOR)
    return labels


def _comm_rows(buckets: list[tuple[BucketTiming, float]], bottom, height: float = 0.55) -> list[tuple]:
    """(bottom, height) of each bucket's bar in its rank's all-reduce lane: a bucket's transfer
    and all-reduce share a row, and buckets whose communication overlaps in time (the wire sends
    the next bucket while gloo reduces this one) get rows of their own, so no bar hides
    another's end. `bottom(base)`: the lane's bottom for a rank drawn at `base`."""
    bases = [base for _, base in buckets]
    rows = stacked_rows([(b.comm_start_ms, b.end_ms) for b, _ in buckets], bases)
    count = {base: 1 + max(r for b, r in zip(bases, rows) if b == base) for base in bases}
    return [(bottom(base) + row * height / count[base], height / count[base] * (0.9 if count[base] > 1 else 1))
            for base, row in zip(bases, rows)]


def plot_bucket_timeline(record: RunRecord, step: int | None = None, ax=None, ranks=None,
                         model=None, hide_labels: bool = True):
    """One steady step per rank: backward ops, each bucket's ready time, its all-reduce.

    Red under the all-reduce lane: communication nothing computes beside (exposed); the title
    says how much of the worst rank's was peer wait, a rank sitting in an all-reduce the other
    had not joined (`dpviz.analysis.stragglers.exposed_split`).
    Hatched on the main thread: backward has finished and the optimizer waits for the
    last bucket. `model` (an alpha-beta fit, `dpviz.lessons.collectives.bandwidth.AlphaBeta`, or
    anything with `time_ms(nbytes)`) outlines each all-reduce's predicted duration (dotted)
    from its real start.
    """
    ranks = list(range(record.world_size)) if ranks is None else list(ranks)
    ax = style.new_axes(ax, figsize=(11, 0.6 + 1.5 * len(ranks)))
    step = steady_steps(record)[-1] if step is None else step
    starts = [s.start_us for s in record.spans_of(kind="step", step=step) if s.rank in ranks]
    if not starts:
        raise ValueError(f"step {step} is not in this record (steps: {record.steps})")
    yticks, labels, exposed, waits, lanes = [], [], [], [], []
    for row, rank in enumerate(ranks):
        tl = step_timeline(record, step, rank, t0_us=min(starts))
        base = (len(ranks) - 1 - row) * 3.4
        lanes.append((tl, base))
        yticks += [base + 0.4, base + 1.5, base + 2.4]
        labels += [f"rank {rank} all-reduce", "bucket ready", f"rank {rank} main thread"]
        exposed.append(sum(e - s for s, e in tl.exposed))
        waits.append(tl.wait_ms)
    ready_labels = _draw_ranks(ax, lanes, model)
    ax.set_yticks(yticks, labels, fontsize=8)
    ax.set_xlabel(f"time in step {step} (ms, common clock)")
    style.tidy(ax)
    n = len(tl.buckets)
    worst = ranks[exposed.index(max(exposed))]
    peer = next(x.peer_wait_ms for x in exposed_split(record, [step]) if x.rank == worst)
    ax.set_title(f"step {step}, {n} bucket{'s' * (n > 1)}: exposed communication "
                 f"{max(exposed):.1f} ms ({min(peer, max(exposed)):.1f} of it peer wait), optimizer waits "
                 f"{max(waits):.1f} ms after backward "
                 + ("(worst rank)" if len(ranks) > 1 else f"(rank {ranks[0]})")
                 + f"\nlive run; {link_note(record.config)}", loc="left", fontsize=9)
    handles = [Patch(color=style.kind_color(k), label=k) for k in ("forward", "backward", "optimizer")]
    if record.config.get("link"):
        handles.append(Patch(facecolor="white", edgecolor=style.MUTED, hatch=style.LINK_HATCH,
                             label="link transfer (emulated)"))
    if max(waits) > 0:   # the legend names only what is drawn
        handles.append(Patch(facecolor="none", edgecolor=style.MUTED, hatch="///", label="waiting for buckets"))
    if max(exposed) > 0:
        handles.append(Patch(color=EXPOSED_COLOR, label="exposed comm"))
    if model is not None:
        handles.append(Patch(fill=False, edgecolor=style.TEXT, ls=":", label="alpha-beta prediction"))
    kept_legend(ax, handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    style.tag(ax, style.source_of(record), *(["model"] if model is not None else []),
              note=style.adjustment_of(record))
    if hide_labels:
        place_labels(ready_labels, READY_WHY, READY_SHIFTS, avoid_bars=True)   # moved before any is hidden
    return ax


def plot_contrast(bucketed: RunRecord, one_bucket: RunRecord, axes=None, rank: int = 0,
                  model=None):
    """The same workload twice on one time scale: buckets overlapping backward, and one
    bucket that can only start when backward ends."""
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(2, 1, figsize=(11, 4.6), sharex=True, layout="constrained")
    for ax, record in zip(axes, (bucketed, one_bucket)):
        plot_bucket_timeline(record, ax=ax, ranks=[rank], model=model, hide_labels=False)
        ax.set_title(f"bucket_cap_mb={cap_label(record.config['bucket_cap_mb'])}: "
                     + ax.get_title(loc="left"), loc="left", fontsize=9)
    place_labels([t for ax in axes for t in ax.texts if t.get_gid() != style.SOURCE_GID],   # once laid out
                 READY_WHY, READY_SHIFTS, avoid_bars=True)
    return axes


def plot_sweep(sweep: BucketSweep, ax=None):
    """Step time and exposed communication against the cap (log scale), buckets labelled."""
    ax = style.new_axes(ax, figsize=(7, 3.6))
    caps = [r.bucket_cap_mb for r in sweep.rows]
    ax.plot(caps, [r.step_ms for r in sweep.rows], "o-", color=style.kind_color("backward"),
            label="step time (median)")
    if any(r.step_ms_quartiles[1] > r.step_ms_quartiles[0] for r in sweep.rows):
        ax.fill_between(caps, [r.step_ms_quartiles[0] for r in sweep.rows],
                        [r.step_ms_quartiles[1] for r in sweep.rows], color=style.kind_color("backward"),
                        alpha=0.2, lw=0, label="step time, 25-75th percentile")
    ax.plot(caps, [r.comm_ms for r in sweep.rows], "s--", color=style.kind_color("allreduce"),
            label="all-reduce time")
    ax.plot(caps, [r.exposed_comm_ms for r in sweep.rows], "^-", color=EXPOSED_COLOR,
            label="exposed all-reduce time")
    for r in sweep.rows:
        ax.annotate(f"{r.n_buckets} bucket{'s' * (r.n_buckets > 1)}", (r.bucket_cap_mb, r.step_ms_quartiles[1]
                    or r.step_ms), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_xticks(caps, [cap_label(c, "\n") for c in caps])
    ax.margins(x=0.12)   # the end labels stay clear of the axes
    ax.set_xlabel("bucket_cap_mb (MiB)")
    ax.set_ylabel("ms per step")
    ax.set_ylim(0, 1.3 * max(max(r.step_ms_quartiles[1], r.step_ms) for r in sweep.rows))
    c = sweep.config
    ax.set_title(f"{sweep.world_size} ranks, {c['layers']}×Linear({c['width']}), batch {c['batch_per_rank']}"
                 f"/rank; live, {link_note(c)}", loc="left", fontsize=9)
    ax.legend(fontsize=8, frameon=False, loc="lower left", ncols=2)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


# --- the exercise's figure: yours beside the reference ------------------------------------

def _bucket_row(ax, y: float, buckets, sizes) -> None:
    left = 0.0
    for k, bucket in enumerate(buckets):
        width = sum(sizes[i] for i in bucket) / 2**20
        ax.barh(y, width, left=left, color=style.bucket_color(k), edgecolor="white")
        label = f"b{k}: {bucket[0]}…{bucket[-1]}" if len(bucket) > 1 else f"b{k}: {bucket[0]}"
        ax.text(left + width / 2, y, label, ha="center", va="center", fontsize=8, rotation=90 * (width < 0.6),
                color=readable_on(style.bucket_color(k), dark=style.TEXT))
        left += width


def plot_buckets_exercise(check: BucketsCheck):
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

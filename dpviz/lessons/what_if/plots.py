"""The predicted step on the same timeline as a live one, and the model's scaling curve."""
from __future__ import annotations

from typing import Sequence

from matplotlib.transforms import offset_copy

from dpviz.analysis.overlap import steady_steps
from dpviz.core.record import RunRecord
from dpviz.lessons.what_if.records import PredictedStep, Scaling
from dpviz.plots import style
from dpviz.plots.legibility import place_labels
from dpviz.plots.timeline import plot_timeline

ASSUMPTIONS = "one flat ring · no contention · no stragglers"
# A best-cap label sits LABEL_RISE_PT above its point: past the hollow marker's radius (8 pt
# across) and its edge. Elsewhere when that is taken: below the point (the rise, the marker and
# a 7-pt label's ~9-pt line), or beside it (the marker's radius, half a 3-digit label, a gap).
LABEL_RISE_PT = 5.5
LABEL_SHIFTS_PT = ((0, 0), (0, -(2 * LABEL_RISE_PT + 9)), (12, -(LABEL_RISE_PT + 4.5)),
                   (-12, -(LABEL_RISE_PT + 4.5)))


def plot_predicted(prediction: PredictedStep, ax=None, name: str = "the predicted step"):
    """The predicted step drawn by `plot_timeline`: every recorded rank replayed (its title,
    led by `name`, says what the model was asked; its tag says "model")."""
    ranks = sorted({s.rank for s in prediction.spans})
    return plot_timeline(prediction, ax=ax, labels={r: f"rank {r} replayed" for r in ranks}, name=name)


def plot_replay(record: RunRecord, replay: PredictedStep) -> list:
    """The recorded step above the model's replay of it, one figure on one time scale: the
    replay is read against the live step, and two figures each scaled to its own step (with
    titles "step 4" and "step 0") made a reader compare bars at different scales."""
    step = steady_steps(record)[-1]
    live, model = style.new_axes_column(2, figsize=(11, 7.2), sharex=True)
    plot_timeline(record, step=step, ax=live, name=f"recorded step {step} (live)")
    plot_predicted(replay, ax=model, name="the model's replay of it")
    return [live, model]


def plot_scaling(tables: Scaling | Sequence[Scaling], ax=None):
    """Scaling efficiency (one rank's step over N ranks' step, each at its best cap) against
    N, one line per link; a hollow marker where exposed communication exceeds the table's
    share of the step, and the best cap written at every other point."""
    tables = [tables] if isinstance(tables, Scaling) else list(tables)
    if not tables:
        raise ValueError("nothing to draw: pass at least one scaling table")
    ax = style.new_axes(ax, figsize=(9, 3.8))
    labels = []
    rise = offset_copy(ax.transData, fig=ax.figure, y=LABEL_RISE_PT, units="points")
    for i, table in enumerate(tables):
        best, eff = table.best(), table.efficiency()
        ns = list(best)
        color = style.rank_color(i)
        link = table.config["link"]
        name = link.get("name") or f"{link['gbps']:g} Gb/s"
        ax.plot(ns, [100 * eff[n] for n in ns], color=color, marker="o", markersize=4,
                label=f"{name} ({link['gbps']:g} Gb/s, α {link['latency_us']:g} µs)")
        share = table.config["exposed_share"]
        over = [n for n in ns if best[n].exposed_comm_ms > share * best[n].step_ms]
        ax.plot(over, [100 * eff[n] for n in over], linestyle="none", marker="o", markersize=8,
                markerfacecolor="white", markeredgecolor=color)
        for n in ns[1::2]:   # above its marker (offset in points: data units would land on it)
            labels.append(ax.text(n, 100 * eff[n], f"{best[n].bucket_cap_mb:g}", ha="center", va="bottom",
                                  fontsize=7, color=color, transform=rise))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks N")
    ax.set_ylabel("scaling efficiency (%)")
    ax.set_ylim(0, 105)
    style.tidy(ax)
    first = tables[0].config
    ax.set_title(f"predicted from {first['learned_from']}, K={first['accum_steps']}: efficiency at the best "
                 f"cap (MiB, written above);\nhollow: exposed communication over {first['exposed_share']:.0%} "
                 f"of the step", loc="left", fontsize=9)
    ax.legend(loc="lower left", fontsize=8, frameon=False)
    style.tag(ax, "model", note=ASSUMPTIONS)
    place_labels(labels, "a best-cap label on another link's or on a marker", shifts_pt=LABEL_SHIFTS_PT,
                 avoid_markers=True)
    return ax

"""One training step, layer by layer: forward vs backward, backward split into B and W."""
from __future__ import annotations

from ..anatomy import StepAnatomy
from . import style

# B (input gradient) is on the critical path to the layer below; W can wait: distinct hues.
PART_COLORS = {"forward": style.kind_color("forward"), "B (input grad)": "#C44E52",
               "W (weight grad)": "#DD8452", "other": style.MUTED}


def anatomy_rows(record: StepAnatomy) -> list[dict]:
    """Per block, the bars to draw (ms) — backward parts sum to the measured backward."""
    return [{"label": f"block {l.index}: {l.name}", "forward": l.forward_ms,
             "B (input grad)": l.input_grad_ms, "W (weight grad)": l.weight_grad_ms,
             "other": max(0.0, l.other_ms), "backward": l.backward_ms,
             "saved_mb": l.saved_bytes / 2 ** 20} for l in record.layers]


def plot_anatomy(record: StepAnatomy, ax=None):
    """Two bars per block: forward, and backward stacked as B + W + other (median times)."""
    rows = anatomy_rows(record)
    ax = style.new_axes(ax, figsize=(10, 0.7 + 0.75 * len(rows)))
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i
        ax.barh(y + 0.2, row["forward"], height=0.38, color=PART_COLORS["forward"],
                label="forward" if i == 0 else None)
        left = 0.0
        for part in ("B (input grad)", "W (weight grad)", "other"):
            ax.barh(y - 0.2, row[part], left=left, height=0.38, color=PART_COLORS[part],
                    label=part if i == 0 else None)
            left += row[part]
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows][::-1])
    ax.set_xlabel("ms (median of profiled steps, one rank)")
    ax.set_title(f"one step, batch {record.batch}: backward ≈ "
                 f"{sum(r['backward'] for r in rows) / sum(r['forward'] for r in rows):.1f}× forward",
                 loc="left")
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    style.tidy(ax)
    return ax


def plot_activations(record: StepAnatomy, ax=None):
    """Bytes each block keeps for backward (its input and its ReLU output; weights excluded)."""
    rows = anatomy_rows(record)
    ax = style.new_axes(ax, figsize=(10, 2.8))
    ax.bar(range(len(rows)), [r["saved_mb"] for r in rows], color=style.kind_color("forward"))
    ax.set_xticks(range(len(rows)), [f"block {i}" for i in range(len(rows))])
    ax.set_ylabel("MiB saved for backward")
    ax.set_title(f"activations held between forward and backward: "
                 f"{record.activation_bytes / 2 ** 20:.2f} MiB distinct (a block's input is the "
                 "previous block's output, counted once)", loc="left", fontsize=9)
    style.tidy(ax)
    return ax

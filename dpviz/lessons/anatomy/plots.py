"""One training step, layer by layer: forward vs backward, backward split into B and W."""
from __future__ import annotations

from dpviz.lessons.anatomy.records import StepAnatomy
from dpviz.plots import style

# B (input gradient) is on the critical path to the layer below; W can wait: distinct hues.
PART_COLORS = {"forward": style.kind_color("forward"), "B (input grad)": "#C44E52",
               "W (weight grad)": "#DD8452", "other": style.MUTED}


def anatomy_rows(record: StepAnatomy) -> list[dict]:
    """Per block, the bars to draw (ms) — backward parts sum to the measured backward."""
    return [{"label": f"block {l.index}: {l.name}" if l.kind == "block" else l.name,
             "tick": f"block {l.index}" if l.kind == "block" else l.name, "forward": l.forward_ms,
             "B (input grad)": l.input_grad_ms, "W (weight grad)": l.weight_grad_ms,
             "other": max(0.0, l.other_ms), "backward": l.backward_ms,
             "kept_kib": l.kept_bytes / 2 ** 10, "saved_kib": l.saved_bytes / 2 ** 10,
             "saved_here_kib": (l.saved_bytes - l.saved_elsewhere_bytes) / 2 ** 10,
             "saved_input_kib": l.saved_elsewhere_bytes / 2 ** 10}
            for l in record.layers]


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
    model = f"{record.workload.name}, " if record.workload is not None else ""
    ax.set_title(f"one step, {model}batch {record.batch}: backward ≈ "
                 f"{sum(r['backward'] for r in rows) / sum(r['forward'] for r in rows):.1f}× forward",
                 loc="left")
    # beside the bars: inside the axes it can cover a long backward bar
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_activations(record: StepAnatomy, ax=None):
    """Per block, bytes kept for backward: the profiler's figure, the hooks' beside it as the check.

    Profiler: allocated inside the block's forward and still alive when it ends. Hooks: tensors
    autograd saved in the block's forward; they also count the block's input (allocated by the
    block below, or the data), and miss the head's output (saved by the loss, not the head).
    """
    rows = anatomy_rows(record)
    ax = style.new_axes(ax, figsize=(10, 3.0))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["kept_kib"] for r in rows], width=0.38,
           color=style.kind_color("forward"), label="profiler: allocated in the forward, alive at its end")
    here = [r["saved_here_kib"] for r in rows]
    ax.bar([x + 0.2 for x in xs], here, width=0.38, color="none", edgecolor=style.MUTED, hatch="//",
           label="check, saved-tensor hooks: saved, allocated in the block")
    ax.bar([x + 0.2 for x in xs], [r["saved_input_kib"] for r in rows], bottom=here, width=0.38,
           color="none", edgecolor=style.MUTED, hatch="..",
           label="hooks: saved, allocated below it (its input)")
    ax.set_xticks(list(xs), [r["tick"] for r in rows], fontsize=8)
    ax.set_ylabel("KiB kept for backward")
    ax.set_ylim(0, 1.5 * max(max(r["kept_kib"], r["saved_kib"]) for r in rows))   # room for the legend
    ax.set_title(f"activations after the forward: {record.forward_kept_bytes / 2 ** 10:.1f} KiB allocated "
                 f"and alive (profiler); {record.activation_bytes / 2 ** 10:.1f} KiB distinct saved (hooks: "
                 "+ the data, − the head's output)", loc="left", fontsize=9)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax

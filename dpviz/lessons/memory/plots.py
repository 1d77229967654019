"""Where one replica's memory goes: stacked bars of params / grads / optimizer / activations."""
from __future__ import annotations

from dpviz.lessons.memory.records import MemoryBreakdown, PARTS
from dpviz.plots import style

# One colour per part, shared with the ZeRO figures; taken from the palette's span kinds.
PART_COLORS = {"params": style.kind_color("compute"), "buffers": style.MUTED, "grads": style.kind_color("backward"),
               "optimizer": style.kind_color("optimizer"), "activations": style.kind_color("forward")}
PART_LABELS = {"params": "parameters", "buffers": "buffers (BatchNorm statistics)", "grads": "gradients", "optimizer": "optimizer state",
               "activations": "activations"}
MB = 1e6


def breakdown_table(records: list[MemoryBreakdown], label: str) -> list[tuple[str, dict[str, float]]]:
    """(bar label, part → MB) per record; `label` is 'optimizer' or a config field."""
    rows = []
    for r in records:
        name = r.optimizer if label == "optimizer" else f"{label}={r.config[label]}"
        rows.append((name, {p: r.part(p) / MB for p in PARTS}))
    return rows


def breakdown_title(records: list[MemoryBreakdown]) -> str:
    """Names every model drawn with its parameter count: one when all bars share it."""
    models = list(dict.fromkeys((r.workload.name if r.workload is not None else "model", r.n_params)
                                for r in records))
    if len(models) == 1:
        (name, n), = models
        return f"measured after one real step, {name + ', ' if records[0].workload else ''}{n:,} parameters"
    return "measured after one real step: " + ", ".join(f"{name} {n:,}" for name, n in models) + " parameters"


def plot_breakdown(records: list[MemoryBreakdown], label: str = "optimizer", ax=None):
    """One stacked bar per record, labelled by optimizer name or by a config field."""
    if not records:
        raise ValueError("no breakdowns to draw: pass at least one MemoryBreakdown")
    ax = style.new_axes(ax, figsize=(7, 3.5))
    rows = breakdown_table(records, label)
    drawn = [p for p in PARTS if any(parts[p] for _, parts in rows)]   # no empty legend entries
    for i, (_, parts) in enumerate(rows):
        bottom = 0.0
        for part in drawn:
            ax.bar(i, parts[part], bottom=bottom, color=PART_COLORS[part], width=0.6,
                   label=PART_LABELS[part] if i == 0 else None)
            bottom += parts[part]
        ax.text(i, bottom, f"{bottom:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), [name for name, _ in rows])
    ax.set_ylabel("MB held by one replica")
    style.tidy(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_title(breakdown_title(records), loc="left")
    style.tag(ax, "live")
    return ax

"""Tensor / sequence parallelism: who holds which weights, bytes per rank, bytes on the wire."""
from __future__ import annotations

from dpviz.lessons.tensor_parallel.records import TensorParallelRecord
from dpviz.plots import style

KIB = 1024
QUANTITIES = ("parameters", "hidden activations", "LayerNorm activations")


def plot_weight_shards(record: TensorParallelRecord, tp_size: int | None = None, ax=None):
    """W1 (H×D) split by rows and W2 (D×H) split by columns, coloured by the rank holding them.

    Shapes and bytes come from what each live rank held; grey strips are replicated.
    """
    ax = style.new_axes(ax, figsize=(8, 3.4))
    n = tp_size or max(record.tp_sizes)
    rows = record.rows("tp", n)
    d, h = record.config["d_model"], record.config["hidden"]
    scale = 3.0 / h                                   # H hidden units span 3 units of height
    x1, x2 = 0.0, d * scale + 1.2                     # W1 on the left, W2 on the right
    for r in rows:
        hr, _ = r.param_shapes["fc1.weight"]
        color = style.rank_color(r.rank)
        y0 = r.rank * hr * scale
        ax.add_patch(_rect(x1, 3.0 - y0 - hr * scale, d * scale, hr * scale, color))
        ax.add_patch(_rect(x2 + y0, 3.0 - d * scale, hr * scale, d * scale, color))
        held = sum(v for k, v in r.param_bytes.items() if k.startswith(("fc1", "fc2.weight")))
        ax.text(x2 + h * scale + 0.3, 2.6 - 0.35 * r.rank, f"rank {r.rank}: {held / KIB:.1f} KiB of "
                f"W1, b1, W2", color=color, fontsize=9, va="center")
    replicated = sum(v for k, v in rows[0].param_bytes.items() if k.startswith("ln") or k == "fc2.bias")
    ax.text(x2 + h * scale + 0.3, 2.6 - 0.35 * len(rows), f"every rank: {replicated} B of LayerNorm "
            "+ fc2 bias (replicated)", color=style.MUTED, fontsize=9, va="center")
    ax.text(x1 + d * scale / 2, 3.1, f"fc1 W1 ({h}×{d})\ncolumn-parallel: rows split",
            ha="center", va="bottom", fontsize=9)
    ax.text(x2 + h * scale / 2, 3.1, f"fc2 W2 ({d}×{h})\nrow-parallel: columns split",
            ha="center", va="bottom", fontsize=9)
    ax.set_xlim(-0.2, x2 + h * scale + 4.2)
    ax.set_ylim(-0.2, 3.9)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"TP size {n}: each rank holds 1/{n} of the hidden units", loc="left")
    style.tag(ax, "live")
    return ax


def _rect(x, y, w, h, color):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=color, edgecolor="white", alpha=0.85)


def bytes_per_rank(record: TensorParallelRecord, mode: str) -> dict[str, list[tuple[int, int, int]]]:
    """quantity → [(TP size, rank, bytes measured on that rank)]."""
    out: dict[str, list[tuple[int, int, int]]] = {q: [] for q in QUANTITIES}
    for n in record.tp_sizes:
        for r in record.rows(mode, n):
            out["parameters"].append((n, r.rank, sum(r.param_bytes.values())))
            out["hidden activations"].append((n, r.rank, r.saved_bytes("mlp", hidden_only=True)))
            out["LayerNorm activations"].append((n, r.rank, r.saved_bytes("layernorm")))
    return out


def plot_bytes_per_rank(record: TensorParallelRecord, ax=None):
    """Measured KiB per rank for each TP size, TP alone (solid) and TP + SP (hatched)."""
    ax = style.new_axes(ax, figsize=(8, 3.4))
    sizes = record.tp_sizes
    width = 0.8 / (2 * len(sizes))
    for m, mode in enumerate(("tp", "tp+sp")):
        for q, (quantity, points) in enumerate(bytes_per_rank(record, mode).items()):
            for s, n in enumerate(sizes):
                vals = [b for size, _, b in points if size == n]
                x = q + (m * len(sizes) + s - len(sizes) + 0.5) * width
                ax.bar(x, max(vals) / KIB, width * 0.92, color=style.rank_color(s),
                       hatch="//" if mode == "tp+sp" else None, edgecolor="white",
                       label=f"{'TP + SP' if mode == 'tp+sp' else 'TP'}, N = {n}" if q == 0 else None)
                ax.text(x, max(vals) / KIB, f"{max(vals) / KIB:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(QUANTITIES)), QUANTITIES)
    ax.set_ylabel("KiB per rank (measured, largest rank)")
    ax.legend(fontsize=8, frameon=False, ncol=2)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_comm(record: TensorParallelRecord, tp_size: int | None = None, ax=None):
    """Bytes each rank sends per step (ring algorithm), one segment per collective it issued."""
    ax = style.new_axes(ax, figsize=(9, 2.6))
    n = tp_size or max(record.tp_sizes)
    colors = {"all_reduce": style.kind_color("allreduce"), "all_gather": "#64B5CD",
              "reduce_scatter": "#CCB974"}
    seen = set()
    for i, mode in enumerate(("tp", "tp+sp")):
        left = 0.0
        for c in record.rows(mode, n)[0].collectives:
            b = c.ring_bytes(n) / KIB
            label = {"forward": "fwd", "backward": "bwd"}.get(c.phase, "")
            key = "LayerNorm + bias grad all-reduce" if c.phase == "grad sync" else c.op.replace("_", "-")
            ax.barh(i, b, left=left, color=colors[c.op], edgecolor="white",
                    hatch="xx" if c.phase == "grad sync" else None,
                    label=key if key not in seen else None)
            seen.add(key)
            if b > 0.5:
                ax.text(left + b / 2, i, label, ha="center", va="center", fontsize=7)
            left += b
        ax.text(left, i, f"  {left:.2f} KiB", va="center", fontsize=8)
    ax.set_yticks([0, 1], ["TP", "TP + SP"])
    ax.invert_yaxis()
    ax.set_xlabel(f"KiB sent per rank per forward + backward (ring, N = {n})")
    ax.margins(x=0.12)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    style.tidy(ax)
    style.tag(ax, "live")
    return ax

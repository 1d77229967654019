"""Mixed-precision figures: bit layouts, ranges, gradient underflow, loss scaling, loss curves."""
from __future__ import annotations

import math

from matplotlib.patches import Rectangle

from dpviz.lessons.precision.records import (
    FormatTable, LOG10_BINS, PrecisionRun, ScalingRun, Underflow,
)
from dpviz.plots import style

FIELD_COLORS = {"sign": style.RANK_COLORS[5], "exponent": style.RANK_COLORS[0],
                "mantissa": style.RANK_COLORS[2]}


def plot_bit_layouts(table: FormatTable, ax=None):
    """One row of bit boxes per format holding the table's value: sign, exponent, mantissa."""
    formats = table.formats
    ax = style.new_axes(ax, figsize=(11, 0.9 + 0.8 * len(formats)))
    for row, (fmt, fields) in enumerate(zip(formats, table.bits)):
        y = len(formats) - 1 - row
        x = 0
        for field, bits in zip(("sign", "exponent", "mantissa"), fields):
            for b in bits:
                ax.add_patch(Rectangle((x, y), 0.95, 0.7, color=FIELD_COLORS[field]))
                ax.text(x + 0.47, y + 0.35, b, ha="center", va="center", color="white", fontsize=7)
                x += 1
        ax.text(-0.5, y + 0.35, f"{fmt.name}\n1+{fmt.exponent_bits}+{fmt.mantissa_bits}", ha="right",
                va="center", fontsize=8)
        ax.text(33, y + 0.35, f"max {fmt.max:.3g}   min normal {fmt.smallest_normal:.3g}   "
                              f"eps {fmt.eps:.3g}", va="center", fontsize=8)
    for field, color in FIELD_COLORS.items():
        ax.add_patch(Rectangle((0, 0), 0, 0, color=color, label=field))
    ax.set_xlim(-6, 58)
    ax.set_ylim(-0.2, len(formats))
    ax.axis("off")
    ax.legend(loc="upper center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.0))
    ax.set_title(f"{table.value:g} as each format stores it (bits read back from torch)", loc="left")
    style.tag(ax, "live")
    return ax


def plot_ranges(table: FormatTable, marks: dict[str, float] | None = None, ax=None):
    """log10 of the representable magnitudes: subnormal, normal range and max, per format."""
    formats = table.formats
    ax = style.new_axes(ax, figsize=(9, 2.6))
    for row, fmt in enumerate(formats):
        y = len(formats) - 1 - row
        lo, mid, hi = (math.log10(v) for v in (fmt.smallest_subnormal, fmt.smallest_normal, fmt.max))
        ax.barh(y, mid - lo, left=lo, color=style.rank_color(row), alpha=0.35, height=0.5)
        ax.barh(y, hi - mid, left=mid, color=style.rank_color(row), height=0.5)
        ax.text(hi + 0.5, y, f"max {fmt.max:.3g}", va="center", fontsize=8)
    for label, v in (marks or {}).items():
        ax.axvline(math.log10(v), color=style.MUTED, ls="--", lw=1)
        ax.text(math.log10(v), len(formats) - 0.4, label, rotation=90, fontsize=7, va="top", ha="right",
                bbox=dict(boxstyle="square,pad=0.1", fc=style.BACKGROUND, ec="none"))   # reads over the bars
    ax.set_yticks(range(len(formats)), [fmt.name for fmt in reversed(formats)])
    ax.set_xlabel("log10 |value|  (pale: subnormal, losing precision; solid: normal)")
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_underflow(result: Underflow, ax=None):
    """Histogram of log10 |gradient| in FP32, before and after the loss scale, against FP16's floor."""
    ax = style.new_axes(ax, figsize=(9, 3.2))
    centers = [(a + b) / 2 for a, b in zip(LOG10_BINS[:-1], LOG10_BINS[1:])]
    ax.bar(centers, result.hist_fp32, width=0.9, color=style.kind_color("backward"), alpha=0.7,
           label="gradients (FP32 reference)")
    ax.bar(centers, result.hist_scaled, width=0.9, color=style.kind_color("optimizer"), alpha=0.6,
           label=f"× loss scale {result.scale:g}")
    fp16 = result.fp16
    for v, text in ((fp16.smallest_subnormal, "fp16 smallest subnormal"),
                    (fp16.smallest_normal, "fp16 smallest normal"), (fp16.max, "fp16 max")):
        ax.axvline(math.log10(v), color=style.TEXT, ls="--", lw=1)
        ax.text(math.log10(v), max(result.hist_fp32 + result.hist_scaled), text, rotation=90,
                fontsize=7, va="top", ha="right",
                bbox=dict(boxstyle="square,pad=0.1", fc=style.BACKGROUND, ec="none"))   # reads over the bars
    z = result.zero_fraction
    ax.set_title(f"entries that are exactly 0: FP32 {z['fp32']:.1%}, FP16 {z['fp16']:.1%}, "
                 f"FP16 with scaling {z['fp16_scaled']:.1%}", loc="left", fontsize=10)
    ax.set_xlabel("log10 |weight gradient|")
    ax.set_ylabel("entries")
    style.tidy(ax)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    style.tag(ax, "live")
    return ax


def plot_scaling(run: ScalingRun, ax=None):
    """The GradScaler's scale per step (log2); skipped (overflowing) steps marked."""
    ax = style.new_axes(ax, figsize=(9, 3))
    steps = range(len(run.scales))
    ax.step(steps, [math.log2(s) for s in run.scales], where="post", color=style.rank_color(0))
    skipped = [i for i in steps if run.skipped[i]]
    ax.scatter(skipped, [math.log2(run.scales[i]) for i in skipped], marker="x",
               color=style.RANK_COLORS[5], zorder=3, label="inf in gradients: step skipped, scale halved")
    ax.set_xlabel("training step")
    ax.set_ylabel("log2 loss scale")
    style.tidy(ax)
    ax.legend(fontsize=8, frameon=False)
    style.tag(ax, "live")
    return ax


def plot_losses(run: PrecisionRun, ax=None):
    """Loss per step for each precision mode (same data, same initial weights)."""
    ax = style.new_axes(ax, figsize=(8, 3.2))
    for i, (mode, losses) in enumerate(run.losses.items()):
        ax.plot(range(len(losses)), losses, color=style.rank_color(i), lw=1.5,
                ls="-" if i == 0 else "--",
                label=f"{mode}: params {run.param_dtype[mode]}, activations {run.activation_dtype[mode]}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (MSE)")
    style.tidy(ax)
    ax.legend(fontsize=8, frameon=False)
    style.tag(ax, "live")
    return ax

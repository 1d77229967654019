"""Gradient noise against batch size, and the three descent variants' loss curves."""
from __future__ import annotations

from dpviz.lessons.descent.records import DescentComparison, GradientNoise, noise_slope
from dpviz.plots import style

VARIANT_COLORS = {"batch": "#0072B2", "stochastic": "#D55E00", "mini-batch": "#009E73"}


def plot_gradient_noise(noise: GradientNoise, ax=None):
    """Measured E‖g_b − g‖² (dots) and σ²/b·(N−b)/(N−1) (line) on log-log axes."""
    ax = style.new_axes(ax, figsize=(6, 4))
    b = [p.batch for p in noise.points]
    ax.plot(b, [p.predicted for p in noise.points], color=style.MUTED, label="σ²/b · (N−b)/(N−1)")
    ax.plot(b, [p.variance for p in noise.points], "o", color=VARIANT_COLORS["mini-batch"],
            label=f"measured ({noise.points[0].draws} draws each)")
    ax.axhline(noise.full_grad_sq_norm, color=VARIANT_COLORS["batch"], ls=":", lw=1,
               label="‖full gradient‖²")
    ax.set(xscale="log", yscale="log", xlabel="mini-batch size b",
           ylabel="‖g_b − g‖² (mean over draws)")
    ax.set_title(f"gradient noise, N = {noise.dataset_size}: slope {noise_slope(noise):.2f}",
                 loc="left")
    ax.legend(fontsize=8, frameon=False)
    style.tag(ax, "live", "model")
    return ax


def plot_descent(comparison: DescentComparison, x: str = "samples", ax=None):
    """Full-dataset loss of each variant against samples processed or parameter updates."""
    if x not in ("samples", "updates"):
        raise ValueError(f"x must be 'samples' or 'updates', got {x!r}")
    ax = style.new_axes(ax, figsize=(6, 4))
    for c in comparison.curves:
        xs = [s / comparison.dataset_size for s in c.samples] if x == "samples" else c.updates
        ax.plot(xs, c.loss, color=VARIANT_COLORS.get(c.name, style.MUTED), lw=1.2,
                label=f"{c.name} (b = {c.batch})")
    ax.set(yscale="log", ylabel="loss on the whole dataset",
           xlabel="epochs (samples processed / N)" if x == "samples" else "parameter updates")
    if x == "updates":
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
    ax.legend(fontsize=8, frameon=False)
    style.tidy(ax)
    style.tag(ax, "live")
    return ax

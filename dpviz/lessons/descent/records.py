"""Gradient noise and descent curves, the data side: what `dpviz.lessons.descent.live` measures, and the
maths beside it (the mini-batch variance formula, the fitted slope). No torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dpviz.core.record import record_kind


@dataclass(frozen=True)
class NoisePoint:
    batch: int
    variance: float       # measured: mean over draws of ‖g_b − g‖²
    predicted: float      # σ²/b · (N − b)/(N − 1)
    draws: int


@record_kind("gradient_noise")
@dataclass(frozen=True)
class GradientNoise:
    config: dict
    dataset_size: int
    per_sample_variance: float   # σ²
    full_grad_sq_norm: float     # ‖g‖², for scale: noise above it means the sign is unreliable
    points: tuple[NoisePoint, ...]


@dataclass(frozen=True)
class DescentCurve:
    name: str                    # "batch", "stochastic", "mini-batch"
    batch: int
    samples: tuple[int, ...]     # samples processed so far (gradient evaluations)
    updates: tuple[int, ...]     # parameter updates so far
    loss: tuple[float, ...]      # loss over the whole dataset after that update


@record_kind("descent_comparison")
@dataclass(frozen=True)
class DescentComparison:
    config: dict
    dataset_size: int
    epochs: int
    curves: tuple[DescentCurve, ...]


def predicted_variance(per_sample_variance: float, batch: int, dataset_size: int) -> float:
    """Variance of the mean of `batch` of `dataset_size` values drawn without replacement."""
    if not 1 <= batch <= dataset_size:
        raise ValueError(f"batch must be between 1 and the dataset size {dataset_size}, got {batch}")
    if dataset_size == 1:
        return 0.0
    return per_sample_variance / batch * (dataset_size - batch) / (dataset_size - 1)


def noise_slope(noise: GradientNoise) -> float:
    """Least-squares slope of log variance against log batch (−1 means noise ∝ 1/b).

    Uses batches up to N/4, where the without-replacement factor (N − b)/(N − 1) stays near 1.
    """
    pts = [p for p in noise.points if p.batch <= noise.dataset_size // 4 and p.variance > 0]
    if len(pts) < 2:
        raise ValueError("need at least two batch sizes up to a quarter of the dataset to fit a slope")
    xs, ys = [math.log(p.batch) for p in pts], [math.log(p.variance) for p in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)

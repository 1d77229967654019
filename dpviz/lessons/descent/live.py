"""Batch, stochastic and mini-batch gradient descent on one problem, and the noise between them.

All three follow the gradient of the same loss; they differ in how many samples estimate it.
A mini-batch of b samples drawn without replacement from N has

    E ‖g_b − g‖² = σ²/b · (N − b)/(N − 1),    σ² = mean_i ‖g_i − g‖²   (per-sample spread)

so the noise falls like 1/b — and a data-parallel step over N ranks is one mini-batch of
N·b samples: data parallelism buys a less noisy gradient, not a different algorithm.

The problem is the workload of every live run (`dpviz.engine.workloads`: the MLP and its synthetic
regression data). Single process: nothing here needs ranks. What it returns, and the maths
of it (no torch), is `dpviz.lessons.descent.records`.
"""
from __future__ import annotations

from dpviz.core.config import RunConfig, validate
from dpviz.lessons.descent.records import (
    DescentComparison, DescentCurve, GradientNoise, NoisePoint, predicted_variance,
)

FACADE = ("gradient_noise", "compare_descent")  # what `dpviz.<name>` offers from here

DEFAULT = RunConfig(world_size=1, layers=2, width=16, batch_per_rank=256, lr=0.1)


def _problem(cfg: RunConfig):
    from dpviz.engine.workloads import build_mlp, global_batch

    x, y = global_batch(cfg, 0, 0)            # (N, width), (N, 1): the whole dataset
    return build_mlp(cfg), x, y


def _grad(model, x, y):
    import torch

    from dpviz.engine.workloads import loss_fn

    model.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def gradient_noise(batches=(1, 2, 4, 8, 16, 32, 64, 128), draws: int = 64,
                   cfg: RunConfig | None = None, seed: int = 0) -> GradientNoise:
    """Measure ‖g_b − g‖² over `draws` random mini-batches per size, at the initial weights."""
    import torch

    cfg = validate(cfg or DEFAULT)
    model, x, y = _problem(cfg)
    n = x.shape[0]
    for b in batches:
        predicted_variance(1.0, b, n)          # validates the sizes before any work
    full = _grad(model, x, y)
    per_sample = torch.stack([_grad(model, x[i:i + 1], y[i:i + 1]) for i in range(n)])  # (N, P)
    sigma2 = float(((per_sample - full) ** 2).sum(1).mean())
    gen = torch.Generator().manual_seed(seed)
    points = []
    for b in batches:
        sq = [float(((_grad(model, x[idx], y[idx]) - full) ** 2).sum())
              for idx in (torch.randperm(n, generator=gen)[:b] for _ in range(draws))]
        points.append(NoisePoint(batch=b, variance=sum(sq) / draws,
                                 predicted=predicted_variance(sigma2, b, n), draws=draws))
    return GradientNoise(config=cfg.to_dict(), dataset_size=n, per_sample_variance=sigma2,
                         full_grad_sq_norm=float((full ** 2).sum()), points=tuple(points))


def _descend(name: str, batch: int, cfg: RunConfig, epochs: int, seed: int) -> DescentCurve:
    """Plain SGD with batches of `batch` from shuffled epochs; full-dataset loss as it goes."""
    import torch

    from dpviz.engine.workloads import loss_fn

    model, x, y = _problem(cfg)
    n = x.shape[0]
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(seed)
    every = max(batch, n // 32)                 # ≤ ~32 loss points per epoch for every variant
    samples, updates, losses = [0], [0], []
    with torch.no_grad():
        losses.append(float(loss_fn(model(x), y)))
    seen = step = 0
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        for lo in range(0, n - batch + 1, batch):
            idx = order[lo:lo + batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
            seen, step = seen + batch, step + 1
            if seen % every < batch:
                with torch.no_grad():
                    losses.append(float(loss_fn(model(x), y)))
                samples.append(seen)
                updates.append(step)
    return DescentCurve(name=name, batch=batch, samples=tuple(samples), updates=tuple(updates),
                        loss=tuple(losses))


def compare_descent(epochs: int = 8, minibatch: int = 16, cfg: RunConfig | None = None,
                    seed: int = 0) -> DescentComparison:
    """Batch (all N), stochastic (1) and mini-batch GD: same model, data, lr and epochs."""
    cfg = validate(cfg or DEFAULT)
    n = cfg.world_size * cfg.batch_per_rank
    if not 1 < minibatch < n:
        raise ValueError(f"minibatch must be between 2 and {n - 1} (the dataset has {n} samples)")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    curves = tuple(_descend(name, b, cfg, epochs, seed)
                   for name, b in (("batch", n), ("stochastic", 1), ("mini-batch", minibatch)))
    return DescentComparison(config=cfg.to_dict(), dataset_size=n, epochs=epochs, curves=curves)

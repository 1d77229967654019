"""Gradient-descent variants and gradient noise on the workload (single process)."""
from __future__ import annotations

import pytest

from dpviz.core.config import RunConfig
from dpviz.lessons.descent import live as D
from dpviz.lessons.descent.records import noise_slope, predicted_variance

CFG = RunConfig(world_size=1, layers=2, width=16, batch_per_rank=128, lr=0.05)


def test_predicted_variance():
    assert predicted_variance(4.0, 1, 100) == 4.0
    assert predicted_variance(4.0, 100, 100) == 0.0          # the whole dataset: no noise
    assert predicted_variance(4.0, 2, 3) == pytest.approx(4.0 / 2 * 1 / 2)
    with pytest.raises(ValueError):
        predicted_variance(1.0, 0, 10)


@pytest.fixture(scope="module")
def noise():
    return D.gradient_noise(batches=(1, 4, 16, 32, 128), draws=48, cfg=CFG)


def test_gradient_noise_falls_like_one_over_batch(noise):
    v = [p.variance for p in noise.points]
    assert v == sorted(v, reverse=True)
    assert -1.3 < noise_slope(noise) < -0.7
    for p in noise.points[:-1]:
        assert 0.5 < p.variance / p.predicted < 2.0
    assert noise.points[-1].variance < 1e-10                   # b = N is the full gradient


def test_descent_variants_same_epochs_different_updates():
    rec = D.compare_descent(epochs=2, minibatch=16, cfg=CFG)
    batch, sgd, mini = rec.curves
    assert (batch.updates[-1], sgd.updates[-1], mini.updates[-1]) == (2, 256, 16)
    assert batch.samples[-1] == sgd.samples[-1] == mini.samples[-1] == 256
    assert batch.loss[0] == sgd.loss[0] == mini.loss[0]         # same start
    assert all(c.loss[-1] < c.loss[0] for c in rec.curves)
    # per epoch, more (noisier) updates get further than one exact update
    assert sgd.loss[-1] < batch.loss[-1] and mini.loss[-1] < batch.loss[-1]


def test_compare_descent_rejects_bad_minibatch():
    with pytest.raises(ValueError, match="minibatch"):
        D.compare_descent(minibatch=10_000, cfg=CFG)


def test_figures_draw_the_records(noise):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.lessons.descent.plots import plot_descent, plot_gradient_noise

    ax = plot_gradient_noise(noise)
    assert list(ax.lines[1].get_ydata()) == [p.variance for p in noise.points]
    rec = D.compare_descent(epochs=1, minibatch=16, cfg=CFG)
    assert len(plot_descent(rec, "updates").lines) == 3
    with pytest.raises(ValueError, match="samples"):
        plot_descent(rec, "time")
    plt.close("all")

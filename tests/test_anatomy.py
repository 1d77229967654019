"""Step anatomy: the B/W split read from the profiler on a live rank."""
from __future__ import annotations

import pytest

from dpviz import Cluster
from dpviz import anatomy as A
from dpviz.config import RunConfig
from dpviz.plots.anatomy import anatomy_rows


def test_classify_mm_by_shapes():
    assert A.classify_mm(([64, 256], [256, 128]), 64) == "B"     # (batch, out) @ (out, in)
    assert A.classify_mm(([256, 64], [64, 128]), 64) == "W"     # contracts over the batch
    with pytest.raises(ValueError, match="batch size different"):
        A.classify_mm(([64, 64], [64, 64]), 64)


def test_linear_flops():
    assert A.linear_flops(8, 4, 2) == 2 * 8 * 4 * 2


@pytest.fixture(scope="module")
def anatomy():
    cfg = RunConfig(layers=3, width=128, batch_per_rank=48)
    with Cluster(1) as cluster:
        return A.measure_anatomy(cfg, cluster, repeats=3)


def test_every_block_measured(anatomy):
    assert [l.index for l in anatomy.layers] == [0, 1, 2, 3]
    assert anatomy.layers[-1].name == "128→1 head"
    assert all(l.forward_ms > 0 and l.backward_ms > 0 for l in anatomy.layers)


def test_b_and_w_are_nested_in_the_backward(anatomy):
    for l in anatomy.layers:
        assert l.weight_grad_ms > 0 and l.input_grad_ms > 0
        assert l.input_grad_ms + l.weight_grad_ms <= l.backward_ms + 1e-9   # exact: same step


def test_first_block_has_no_input_gradient_product(anatomy):
    # x does not require grad, so autograd skips the B product of block 0 (only its ReLU mask
    # is B work); every other block does one B and one W product per backward
    assert [l.input_grad_products for l in anatomy.layers] == [0, 1, 1, 1]
    assert [l.weight_grad_products for l in anatomy.layers] == [1, 1, 1, 1]


def test_saved_activation_bytes(anatomy):
    act = 48 * 128 * 4                            # one (batch, width) float32 tensor
    # a block saves its input (for W) and its ReLU output (the mask); the head only its input
    assert [l.saved_bytes for l in anatomy.layers] == [2 * act] * 3 + [act]
    assert anatomy.activation_bytes == 4 * act    # input + 3 ReLU outputs, each counted once


def test_rows_for_the_plot(anatomy):
    rows = anatomy_rows(anatomy)
    for row, l in zip(rows, anatomy.layers):
        parts = row["B (input grad)"] + row["W (weight grad)"] + row["other"]
        assert parts == pytest.approx(l.backward_ms)


def test_batch_equal_to_width_is_rejected_before_spawning():
    with pytest.raises(ValueError, match="batch size different"):
        A.measure_anatomy(RunConfig(width=32, batch_per_rank=32))


def test_figures_draw_the_record(anatomy):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.plots.anatomy import plot_activations, plot_anatomy

    assert len(plot_anatomy(anatomy).patches) == 4 * len(anatomy.layers)  # fwd, B, W, other
    bars = plot_activations(anatomy).patches
    assert [b.get_height() * 2 ** 20 for b in bars] == pytest.approx([l.saved_bytes for l in anatomy.layers])
    plt.close("all")

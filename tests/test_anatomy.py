"""Step anatomy: the B/W split read from the profiler on a live rank."""
from __future__ import annotations

import pytest

from dpviz import Cluster
from dpviz.core.config import RunConfig
from dpviz.lessons.anatomy import live as A
from dpviz.lessons.anatomy.plots import anatomy_rows


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
        return A.measure_anatomy(cfg, cluster=cluster, repeats=3)


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


def test_kept_allocations_replays_the_window():
    memory = [(0.0, 1, 100),     # before the window: not this block's
              (5.0, 1, -100),    # a free of older memory: ignored
              (6.0, 2, 40),      # allocated and freed inside (the Linear output)
              (7.0, 3, 60),      # allocated inside, alive at the end (the ReLU output)
              (8.0, 2, -40),
              (12.0, 3, -60)]    # freed after the window: still kept at its end
    assert A.kept_allocations(memory, 5.0, 10.0) == {3: 60}
    assert A.kept_allocations(memory, 5.0, 20.0) == {}


def test_memory_events_read_from_a_chrome_trace():
    trace = {"traceEvents": [
        {"ph": "i", "name": "[memory]", "ts": 1.5, "args": {"Addr": 7, "Bytes": 24, "Total Allocated": 24}},
        {"ph": "X", "name": "aten::addmm", "ts": 1.0, "dur": 2.0, "args": {}},
        {"ph": "i", "name": "[memory]", "ts": 2.5, "args": {"Addr": 7, "Bytes": -24, "Total Allocated": 0}}]}
    assert A.memory_events(trace) == [(1.5, 7, 24), (2.5, 7, -24)]


def test_reconcile_splits_the_difference():
    kept, saved = {10: 60, 11: 4}, {10: 60, 9: 60}    # ReLU output saved here, input from below
    r = A.reconcile(kept, saved)
    assert r == dict(kept_bytes=64, saved_bytes=120, saved_elsewhere_bytes=60, kept_unsaved_bytes=4)


def test_activation_bytes_profiler_vs_hooks(anatomy):
    act, out = 48 * 128 * 4, 48 * 1 * 4           # one (batch, width) / (batch, 1) float32 tensor
    # profiler: a hidden block keeps only its ReLU output (its Linear output is freed inside the
    # block); the head keeps its (batch, 1) output, which the loss saves
    assert [l.kept_bytes for l in anatomy.layers] == [act] * 3 + [out]
    # hooks: a block saves its input (for W) and its ReLU output (the mask); the head only its input
    assert [l.saved_bytes for l in anatomy.layers] == [2 * act] * 3 + [act]
    # the systematic difference, exactly: the input is saved but allocated below (block 0's is the
    # data, allocated before the profiler started); the head's output is kept but not saved by it
    assert [l.saved_elsewhere_bytes for l in anatomy.layers] == [act] * 4
    assert [l.kept_unsaved_bytes for l in anatomy.layers] == [0] * 3 + [out]
    assert all(l.bytes_reconciled for l in anatomy.layers)
    # totals: input + 3 ReLU outputs saved (each once); the profiler sees the forward leave the
    # 3 ReLU outputs and the head's output alive
    assert anatomy.activation_bytes == 4 * act
    assert anatomy.forward_kept_bytes == 3 * act + out
    assert anatomy.forward_kept_bytes == anatomy.activation_bytes - act + out


def test_record_round_trips_through_json(anatomy, tmp_path):
    from dpviz.core import record

    assert record.from_dict(A.StepAnatomy, record.to_dict(anatomy)) == anatomy
    path = record.save(anatomy, tmp_path / "anatomy.json")
    assert record.load(path, expect=A.StepAnatomy) == anatomy


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

    from dpviz.lessons.anatomy.plots import plot_activations, plot_anatomy
    from dpviz.plots.legibility import legends_over_bars

    ax = plot_anatomy(anatomy)
    assert len(ax.patches) == 4 * len(anatomy.layers)  # fwd, B, W, other
    assert legends_over_bars(ax.figure) == []   # the legend sits beside the bars, none under it
    bars = plot_activations(anatomy).patches    # profiler bars, then hooks: allocated here, input
    n, kib = len(anatomy.layers), [b.get_height() * 2 ** 10 for b in plot_activations(anatomy).patches]
    assert len(bars) == 3 * n
    assert kib[:n] == pytest.approx([l.kept_bytes for l in anatomy.layers])
    assert [h + i for h, i in zip(kib[n:2 * n], kib[2 * n:])] == pytest.approx([l.saved_bytes for l in anatomy.layers])
    assert kib[2 * n:] == pytest.approx([l.saved_elsewhere_bytes for l in anatomy.layers])
    plt.close("all")


# --- the GPT: attention and MLP of every block, B and W per layer -----------------------------

GPT_CFG = RunConfig(model="gpt", layers=2, width=64, batch_per_rank=24)   # 384 token rows


@pytest.fixture(scope="module")
def gpt_anatomy():
    with Cluster(1) as cluster:
        return A.measure_anatomy(GPT_CFG, cluster=cluster, repeats=3)


def test_gpt_layers_are_attention_and_mlp_of_each_block(gpt_anatomy):
    assert [l.name for l in gpt_anatomy.layers] == [
        "tok_emb + pos_emb", "blocks.0.attn", "blocks.0.mlp", "blocks.1.attn", "blocks.1.mlp", "ln_f + head"]
    assert len(gpt_anatomy.of_kind("attention")) == len(gpt_anatomy.of_kind("mlp")) == GPT_CFG.layers
    assert gpt_anatomy.workload.name == "gpt" and "blocks.1.attn.qkv.weight" in gpt_anatomy.workload.param_names()
    for l in gpt_anatomy.layers:
        assert l.forward_ms > 0 and l.backward_ms > 0
        assert l.input_grad_ms + l.weight_grad_ms <= l.backward_ms + 1e-9   # exact: same step
        assert l.bytes_reconciled


def test_gpt_b_and_w_products_per_linear(gpt_anatomy):
    d, rows = GPT_CFG.width, GPT_CFG.batch_per_rank * 16            # 16 tokens per sample
    for l in gpt_anatomy.of_kind("attention") + gpt_anatomy.of_kind("mlp"):
        # two Linears each (qkv + proj, fc + proj): one B and one W product apiece
        assert (l.input_grad_products, l.weight_grad_products) == (2, 2)
        assert l.input_grad_ms > 0 and l.weight_grad_ms > 0
    assert gpt_anatomy.layers[1].flops == 2 * rows * (d * 3 * d + d * d)
    assert gpt_anatomy.layers[2].flops == 2 * rows * (2 * d * 4 * d)
    emb = gpt_anatomy.layers[0]          # token ids need no gradient: the embedding is W only
    assert emb.input_grad_products == emb.weight_grad_products == 0 and emb.weight_grad_ms > 0
    # the loss and the residual adds belong to no layer; they are recorded apart
    assert gpt_anatomy.outside_backward_ms > 0


def test_gpt_attention_saves_less_than_its_mlp(gpt_anatomy):
    # bytes are exact: attention keeps q/k/v (3d) + output and a (heads, T) log-sum-exp per
    # sample; the MLP its 4d hidden twice (fc output for GELU, GELU output for proj)
    for attn, mlp in zip(gpt_anatomy.of_kind("attention"), gpt_anatomy.of_kind("mlp")):
        assert attn.saved_bytes < mlp.saved_bytes


def test_gpt_record_round_trips(gpt_anatomy, tmp_path):
    from dpviz.core import record

    assert record.load(record.save(gpt_anatomy, tmp_path / "a.json"), expect=A.StepAnatomy) == gpt_anatomy


def test_gpt_rows_equal_to_a_width_are_rejected_before_spawning():
    with pytest.raises(ValueError, match="batch size different"):   # 16 samples × 16 tokens = 4·64
        A.measure_anatomy(RunConfig(model="gpt", layers=1, width=64, batch_per_rank=16))

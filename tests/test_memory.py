"""Memory breakdown: every part measured on real tensors, checked against what it must be."""
from __future__ import annotations

import pytest

from dpviz.core.config import RunConfig
from dpviz.core.record import load, save
from dpviz.lessons.memory.live import (
    MemoryBreakdown, OPTIMIZERS, adam_moments_check, measure_breakdown, sweep_batch,
)

CFG = RunConfig(layers=3, width=64, batch_per_rank=16)


@pytest.fixture(scope="module")
def by_optimizer() -> dict[str, MemoryBreakdown]:
    return {name: measure_breakdown(CFG, name) for name in OPTIMIZERS}


def test_params_and_grads_are_four_bytes_per_parameter(by_optimizer):
    b = by_optimizer["adam"]
    n = 3 * (64 * 64 + 64) + 64 + 1
    assert b.n_params == n
    assert b.params == b.grads == 4 * n


def test_optimizer_state_counts_moments(by_optimizer):
    # plain SGD keeps nothing, momentum one buffer, Adam two moments (+ a step counter each)
    assert by_optimizer["sgd"].optimizer_state == 0
    assert by_optimizer["momentum"].state_by_key == {"momentum_buffer": by_optimizer["sgd"].params}
    adam = by_optimizer["adam"].state_by_key
    assert adam["exp_avg"] == adam["exp_avg_sq"] == by_optimizer["adam"].params
    assert set(adam) == {"exp_avg", "exp_avg_sq", "step"}


@pytest.mark.numeric
def test_adam_state_is_the_papers_m_and_v():
    from dpviz.lessons.memory.records import describe_adam_check

    diffs = adam_moments_check(CFG, steps=3)
    for key in ("exp_avg", "exp_avg_sq", "params"):    # the formula's own rounding, nothing more
        assert diffs[key] <= diffs[f"bound {key}"], key
    text = describe_adam_check(diffs)       # what 09 prints: a verdict, not a dict of 17-digit floats
    assert text.splitlines()[-1].startswith("verdict: exp_avg is m and exp_avg_sq is v")
    worse = {**diffs, "exp_avg": 2 * diffs["bound exp_avg"]}
    assert "NOT the paper's formula" in describe_adam_check(worse)


def test_a_chart_of_several_models_names_them_all_in_its_title():
    import matplotlib

    matplotlib.use("Agg")
    from dpviz.lessons.memory.plots import plot_breakdown

    by_model = [measure_breakdown(RunConfig(model=m, layers=2, width=32, batch_per_rank=4), "adam")
                for m in ("mlp", "cnn")]
    title = plot_breakdown(by_model, label="model").get_title(loc="left")
    assert all(f"{b.workload.name} {b.n_params:,}" in title for b in by_model), title
    one = plot_breakdown(by_model[:1]).get_title(loc="left")
    assert one == f"measured after one real step, mlp, {by_model[0].n_params:,} parameters"


def test_activations_are_input_plus_every_relu_output(by_optimizer):
    # an MLP keeps its input and each ReLU output (the next Linear's input, counted once)
    per_tensor = CFG.batch_per_rank * CFG.width * 4
    assert by_optimizer["adam"].activations == (CFG.layers + 1) * per_tensor


def test_only_activations_grow_with_the_batch():
    small, big = sweep_batch(CFG, batches=(8, 32))
    assert big.activations == 4 * small.activations
    assert (big.params, big.grads, big.optimizer_state) == (small.params, small.grads, small.optimizer_state)


def test_unknown_optimizer_and_part_are_rejected(by_optimizer):
    with pytest.raises(ValueError, match="choose one of"):
        measure_breakdown(CFG, "lamb")
    with pytest.raises(ValueError, match="unknown part"):
        by_optimizer["adam"].part("kv_cache")


def test_breakdown_round_trips(tmp_path, by_optimizer):
    path = save(by_optimizer["adam"], tmp_path / "b.json")
    assert load(path, MemoryBreakdown) == by_optimizer["adam"]


# --- the GPT and the CNN: the same parts, read from real layers --------------------------------

GPT = RunConfig(model="gpt", layers=2, width=64, batch_per_rank=4)


def test_gpt_breakdown_labels_real_layers_and_counts_adam_twice():
    b = measure_breakdown(GPT, "adam")
    names = [p.name for p in b.workload.params]
    assert b.workload.name == "gpt" and "tok_emb.weight" in names and "blocks.1.attn.qkv.weight" in names
    assert b.params == b.grads == sum(p.bytes for p in b.workload.params) == 4 * b.n_params
    assert b.state_by_key["exp_avg"] == b.state_by_key["exp_avg_sq"] == b.params
    assert b.buffers == 0                        # LayerNorm keeps no running statistics
    assert b.activations > 0


def test_gpt_activations_grow_with_the_batch_and_nothing_else_does():
    small, mid, big = sweep_batch(GPT, batches=(2, 4, 8), optimizer="adam")
    # affine in the batch, exactly: every saved tensor but the position indices has it as a dim
    per_sample = (mid.activations - small.activations) // 2
    assert big.activations - mid.activations == 4 * per_sample
    fixed = small.activations - 2 * per_sample          # the (seq,) position indices, int64
    assert 0 <= fixed < 0.01 * small.activations
    assert (big.params, big.grads, big.optimizer_state) == (small.params, small.grads, small.optimizer_state)


def test_cnn_batchnorm_buffers_are_counted_apart_from_parameters():
    import torch

    from dpviz.engine.workloads import build_workload

    cfg = RunConfig(model="cnn", layers=2, width=8, batch_per_rank=4)
    b = measure_breakdown(cfg, "sgd")
    model = build_workload(cfg).model
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert norms, "the CNN has BatchNorm layers"
    # running mean + running variance (float32, one per channel) + num_batches_tracked (int64)
    assert b.buffers == sum(2 * 4 * m.num_features + 8 for m in norms) > 0
    assert b.part("buffers") == b.buffers and b.total == b.params + b.buffers + b.grads + b.activations
    assert b.params == 4 * b.n_params                    # buffers are not parameters

"""Memory breakdown: every part measured on real tensors, checked against what it must be."""
from __future__ import annotations

import pytest

from dpviz.config import RunConfig
from dpviz.memory import (OPTIMIZERS, MemoryBreakdown, adam_moments_check, measure_breakdown,
                          sweep_batch)
from dpviz.record import load, save

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
    diffs = adam_moments_check(CFG, steps=3)
    for key in ("exp_avg", "exp_avg_sq", "params"):    # the formula's own rounding, nothing more
        assert diffs[key] <= diffs[f"bound {key}"], key


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
        by_optimizer["adam"].part("buffers")


def test_breakdown_round_trips(tmp_path, by_optimizer):
    path = save(by_optimizer["adam"], tmp_path / "b.json")
    assert load(path, MemoryBreakdown) == by_optimizer["adam"]

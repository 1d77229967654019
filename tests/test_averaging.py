"""The worked example, uneven shards and parameter vs gradient averaging, on live ranks."""
from __future__ import annotations

import pytest

from dpviz.core.config import RunConfig
from dpviz.core.rounding import relative_bound
from dpviz.engine.workloads import reference_sgd_bound
from dpviz.lessons.averaging import live as A, records as R


@pytest.fixture(scope="module")
def sum_example(cluster2):
    return A.worked_example(cluster=cluster2, steps=3, reduction="sum")


@pytest.mark.numeric
def test_worked_example_first_step_by_hand(sum_example):
    # x = 1..4, y = 2x, w = 1: rank 0 has (1,2),(2,4); rank 1 has (3,6),(4,8)
    first = sum_example.steps[0]
    assert first.losses == (5.0, 25.0)                 # (1-2)²+(2-4)², (3-6)²+(4-8)²
    assert first.grads == (-10.0, -50.0)               # Σ 2(wx−y)x per shard
    assert first.averaged_grad == -30.0
    assert first.w_after == pytest.approx(4.0)         # 1 − 0.1·(−30)
    assert sum_example.max_w_diff_across_ranks == 0.0  # exact: every rank receives the same all-reduce


def test_seed_numbers_wrong_exactly_where_rank_1_enters(sum_example):
    checks = {c.quantity: c for c in R.check_seed(sum_example)}
    assert checks["loss rank 0"].agrees and checks["grad rank 0"].agrees
    assert [q for q, c in checks.items() if not c.agrees] == [
        "loss rank 1", "grad rank 1", "averaged grad", "w after step 1"]
    # the printed −14 is Σ 2(z − y) over rank 1's shard: the chain-rule factor x is missing
    assert R.grad_without_chain_factor((3.0, 4.0), (6.0, 8.0), 1.0) == R.SEED_PRINTED["grad rank 1"]


def test_sum_loss_diverges_mean_loss_converges(cluster2, sum_example):
    mean = A.worked_example(cluster=cluster2, steps=6, reduction="mean")
    assert [s.w_after for s in mean.steps[:2]] == pytest.approx([2.5, 1.75])
    assert abs(mean.steps[-1].w_after - 2) < abs(mean.steps[0].w - 2) / 8     # error × (−0.5) per step
    assert [s.w_after - 2 for s in sum_example.steps] == pytest.approx([2, -4, 8])  # × (−2) per step


def test_worked_example_rejects_bad_input(cluster2):
    with pytest.raises(ValueError, match="reduction"):
        A.worked_example(cluster=cluster2, reduction="max")


@pytest.mark.numeric
def test_uneven_shards_weighted_average_is_the_full_gradient(cluster2):
    cfg = RunConfig(layers=2, width=32)
    rec = A.uneven_shards(cfg, cluster=cluster2, sizes=(24, 8))
    bound = rec.rounding_bound
    weighted, plain, ddp_plain, ddp_scaled = (rec.errors[n] for n in R.AGGREGATIONS)
    assert weighted <= bound and ddp_scaled <= bound
    assert plain > 1000 * bound and rec.relative_errors[R.AGGREGATIONS[1]] > 0.05
    assert abs(ddp_plain - plain) <= 2 * bound               # DDP computes the plain mean


@pytest.mark.numeric
def test_even_shards_plain_mean_is_already_right(cluster2):
    cfg = RunConfig(layers=2, width=32)
    rec = A.uneven_shards(cfg, cluster=cluster2, sizes=(16, 16))
    assert max(rec.errors.values()) <= rec.rounding_bound


def test_uneven_shards_needs_one_size_per_rank(cluster2):
    with pytest.raises(ValueError, match="one shard size"):
        A.uneven_shards(cluster=cluster2, sizes=(8, 8, 8))


@pytest.mark.numeric
def test_gradient_vs_parameter_averaging(cluster2):
    cfg = RunConfig(layers=2, width=16, batch_per_rank=8, lr=0.2)
    rec = A.compare_averaging(cluster=cluster2, periods=(1, 8), steps=16, cfg=cfg)
    grad, every_step, every_8 = rec.runs
    # exact: DDP replicas hold the same bits, and their mean over 2 ranks, (θ + θ)/2, is θ
    assert max(grad.drift) == 0.0
    assert grad.averages == 16 and every_8.averages == 2
    # for plain SGD, averaging parameters after every step *is* averaging gradients, up to
    # rounding: each of the 16 steps perturbs every weight by at most relative_bound of its size
    assert every_step.eval_loss == pytest.approx(grad.eval_loss, rel=16 * relative_bound(cfg))
    # between averages replicas drift apart; an average brings them back together
    assert every_8.drift[6] > every_8.drift[0] > 1e-4
    assert every_8.drift[8] < every_8.drift[7]


def test_averagings_measurement_from_one_all_gather_is_what_all_reduces_give(cluster2):
    """Drift, mean parameters and mean loss from one all_gather of several steps equal the
    three all-reduces per step they replace, bit for bit on 2 ranks (a sum of two is a + b in
    any order)."""
    from rank_tasks import averaging_measures_both_ways

    for result in cluster2.run_task(averaging_measures_both_ways):
        assert result["gathered"] == result["reduced"]
        assert result["gathered"][0] > 0


def test_averagings_measurement_gathered_in_chunks_is_the_same(cluster2):
    from rank_tasks import averaging_gathered_step_by_step

    assert cluster2.run_task(averaging_gathered_step_by_step,
                             RunConfig(layers=2, width=16, batch_per_rank=4)) == [True, True]


def test_figures_draw_the_records(cluster2, sum_example):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.lessons.averaging.plots import plot_drift, plot_uneven, plot_worked_example
    from dpviz.plots.legibility import fractional_ticks

    ax = plot_worked_example([sum_example])
    assert list(ax.lines[0].get_ydata()) == [1.0, 4.0, -2.0, 10.0]
    assert fractional_ticks(ax.figure) == []   # steps 0..3: no step 0.5
    rec = A.uneven_shards(RunConfig(layers=2, width=32), cluster=cluster2, sizes=(24, 8))
    assert len(plot_uneven(rec).patches) == len(R.AGGREGATIONS)
    cmp = A.compare_averaging(cluster=cluster2, periods=(4,), steps=4,
                              cfg=RunConfig(layers=1, width=8, batch_per_rank=4))
    assert [list(l.get_ydata()) for l in plot_drift(cmp).lines] == [list(r.drift) for r in cmp.runs]
    plt.close("all")


def test_period_slider_reruns_live(cluster2):
    import matplotlib

    from dpviz import period_slider

    matplotlib.use("module://matplotlib_inline.backend_inline")  # the notebook's backend
    try:
        panel = period_slider(cluster2, periods=(2, 4), value=4, steps=4)
        slider, status = panel.children[0].children
        assert [v for _, v in slider.options] == [2, 4] and "H=4: re-ran live" in status.value
        slider.value = 2
        assert "H=2: re-ran live" in status.value
        with pytest.raises(ValueError, match="not one of the periods"):
            period_slider(cluster2, periods=(2, 4), value=3)
    finally:
        matplotlib.use("Agg")


@pytest.mark.numeric
def test_weight_averaging_hook_passes_a_parameter_check_but_is_not_large_batch_sgd(cluster2):
    cmp = A.compare_hooks(cluster=cluster2, steps=4)
    right, bug = cmp.run("gradient"), cmp.run("weight")
    # the right hook: replicas bit-identical always (every rank receives the same all-reduce),
    # large-batch SGD to float32 rounding: a sum of 2 shard means in another order
    assert max(right.params_after_step) == 0.0 and max(right.grads_after_backward) == 0.0
    assert max(right.vs_large_batch) <= reference_sgd_bound(RunConfig.from_dict(cmp.config))
    # the bug: the naive check (parameters right after backward) passes, exactly …
    assert max(bug.params_after_backward) == 0.0
    # … but the gradients were never averaged, so ranks step apart and leave large-batch SGD
    assert min(bug.grads_after_backward) > 1e-3
    assert min(bug.params_after_step) > 1e-4
    assert min(bug.vs_large_batch[1:]) > 1e-4
    import matplotlib

    matplotlib.use("Agg")
    from dpviz.lessons.averaging.plots import plot_hook_check

    assert len(plot_hook_check(cmp).lines) == 2 * 3              # 2 hooks × 3 checks


def test_compare_hooks_needs_two_steps(cluster2):
    with pytest.raises(ValueError, match="steps >= 2"):
        A.compare_hooks(cluster=cluster2, steps=1)


def test_no_reading_of_the_shard_loss_gives_the_seeds_13():
    readings = R.loss_readings((3, 4), (6, 8), 1.0)
    assert readings["Σ (z − y)²"] == 25 and readings["mean (z − y)²"] == 12.5
    assert 13 not in readings.values()
    assert R.loss_readings((1, 2), (2, 4), 1.0)["Σ (z − y)²"] == 5     # rank 0's printed 5 holds


def test_the_13_argument_states_its_assumption():
    """Issue 30: "data giving 13 would not give −14" holds assuming y = 2x (then x = 2, 3),
    not for free targets: y = 6.50, 3.13 at x = 3, 4 give a loss of 13 and a gradient of −14."""
    on_the_line = R.loss_readings((2, 3), (4, 6), 1.0)["Σ (z − y)²"]
    grad = lambda xs, ys: sum(2 * (x - y) * x for x, y in zip(xs, ys))   # at w = 1
    assert on_the_line == 13 and grad((2, 3), (4, 6)) == -26
    assert R.grad_without_chain_factor((2, 3), (4, 6), 1.0) == -10
    free = (6.50, 3.13)
    # rounding the targets to 2 decimals moves the loss and gradient by < 0.1
    assert abs(R.loss_readings((3, 4), free, 1.0)["Σ (z − y)²"] - 13) < 0.1 and abs(grad((3, 4), free) + 14) < 0.1

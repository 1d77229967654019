"""Expert parallelism on live ranks: all-to-all dispatch and combine, equal to one process."""
from __future__ import annotations

import pytest

from dpviz.core.record import load, save
from dpviz.lessons.experts import live as X


@pytest.fixture(scope="module")
def record(cluster2):
    return X.expert_parallel(cluster=cluster2, skews=(0.0, 1.0, 20.0), tokens=128, d_model=32, hidden=64)


@pytest.mark.numeric
def test_output_equals_single_process_moe(record):
    for run in record.runs:   # float32 re-ordering only (experts.rounding_bound)
        assert run.max_diff_vs_single_process <= X.rounding_bound(record, run)


def test_every_token_goes_to_exactly_one_expert(record):
    for run in record.runs:
        assert [sum(row) for row in run.sent_tokens] == [128, 128]
        assert sum(run.tokens_per_expert) == 256


def test_bytes_are_the_tokens_that_cross_ranks(record):
    for run in record.runs:
        (a0, a1), (b0, b1) = run.sent_tokens
        per_token = run.d_model * 4                          # float32
        # dispatch: rank 0 sends its expert-1 tokens; combine: it returns rank 1's expert-0 tokens
        assert run.bytes_sent == ((a1 + b0) * per_token, (b0 + a1) * per_token)
        assert run.bytes_received == run.bytes_sent          # two ranks: what goes out comes back
        assert run.dispatch_bytes_sent == (a1 * per_token, b0 * per_token)


def test_router_bias_unbalances_the_experts(record):
    fair, tilted, all_in = record.runs
    assert fair.imbalance < tilted.imbalance <= all_in.imbalance == 2.0
    assert all_in.tokens_per_expert == (256, 0)              # expert 1's rank idles
    # rank 1 dispatches all 128 of its tokens; rank 0 (expert 0) returns all 128 results
    assert all_in.bytes_sent == (128 * 32 * 4, 128 * 32 * 4)
    assert all_in.dispatch_bytes_sent == (0, 128 * 32 * 4)


def test_record_round_trips(record, tmp_path):
    assert load(save(record, tmp_path / "moe.json")) == record


def test_bad_input_is_refused(cluster2):
    with pytest.raises(ValueError, match="tokens"):
        X.run_expert_layer(cluster=cluster2, tokens=0)


def test_figures_draw_the_record(record):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.lessons.experts.plots import (
        plot_exchange_bytes, plot_expert_parallel, plot_tokens_per_expert,
    )
    from dpviz.plots.legibility import overlapping_texts, small_texts, texts_over_bars
    from dpviz.plots.style import COLUMN_IN

    ax = plot_tokens_per_expert(record)
    heights = [p.get_height() for p in ax.patches]
    assert sum(heights) == 256 * len(record.runs)
    ax = plot_exchange_bytes(record)
    tops = [p.get_y() + p.get_height() for p in ax.patches][1::2]     # dispatch, then combine on top
    assert tops == [b / 1024 for r in record.runs for b in r.bytes_sent]
    fig = plot_expert_parallel(record)   # both, stacked a notebook column wide: no type scaled down
    assert fig.get_figwidth() <= COLUMN_IN and len(fig.axes) == 2
    assert overlapping_texts(fig) == [] and texts_over_bars(fig) == [] and small_texts(fig) == []
    plt.close("all")

"""Tensor and sequence parallelism of an MLP block on live ranks: equal to one process, bytes as
the formulas say, records round-trip."""
from __future__ import annotations

import pytest

from dpviz.core import record as R
from dpviz.lessons.tensor_parallel import live as T
from dpviz.lessons.tensor_parallel.records import expected

CFG = dict(seq=16, batch=2, d_model=32, hidden=128, seed=0)


@pytest.fixture(scope="module")
def rec(cluster2):
    return T.measure_tensor_parallel(cluster=cluster2, tp_sizes=(1, 2), seq=CFG["seq"], batch=CFG["batch"],
                                     d_model=CFG["d_model"], hidden=CFG["hidden"], seed=CFG["seed"])


@pytest.mark.numeric
def test_tp_and_sp_equal_one_process_and_each_other(rec):
    bounds = T.rounding_bounds(CFG)
    assert {(c.tp_size, c.mode, c.against) for c in rec.checks} == {
        (n, m, a) for n in (1, 2) for m, a in (("tp", "single process"), ("tp+sp", "single process"),
                                              ("tp+sp", "tp"))}
    for check in rec.checks:
        assert set(check.max_abs_diff) == {"output", "input grad", "ln.weight", "ln.bias",
                                           "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
        for name, diff in check.max_abs_diff.items():
            assert diff <= bounds[name], (check, name)
    # with one rank there is nothing to split: the same kernels on the same numbers in one
    # process, bit for bit on any CPU
    assert all(c.worst == 0.0 for c in rec.checks if c.tp_size == 1)


def test_every_rank_reports(rec):
    assert sorted((r.mode, r.tp_size, r.rank) for r in rec.ranks) == sorted(
        (m, n, r) for m in T.MODES for n in (1, 2) for r in range(n))


def test_parameters_split_one_over_n(rec):
    for mode in T.MODES:
        for n in (1, 2):
            want = expected(CFG, n, mode)
            for r in rec.rows(mode, n):
                assert r.param_shapes["fc1.weight"] == (128 // n, 32)      # rows: hidden units
                assert r.param_shapes["fc2.weight"] == (32, 128 // n)      # columns: hidden units
                sharded = sum(r.param_bytes[k] for k in ("fc1.weight", "fc1.bias", "fc2.weight"))
                replicated = sum(r.param_bytes[k] for k in ("ln.weight", "ln.bias", "fc2.bias"))
                assert sharded == want["sharded param bytes"] == (2 * 128 * 32 + 128) * 4 // n
                assert replicated == want["replicated param bytes"] == 3 * 32 * 4


def test_activation_bytes(rec):
    for n in (1, 2):
        for mode in T.MODES:
            want = expected(CFG, n, mode)
            for r in rec.rows(mode, n):
                assert r.saved_bytes("mlp", hidden_only=True) == want["hidden activation bytes"]
                assert r.saved_bytes("layernorm") == want["layernorm activation bytes"]
    tp, sp = rec.rows("tp", 2)[0], rec.rows("tp+sp", 2)[0]
    assert tp.saved_bytes("mlp", True) == 2 * 16 * 2 * 64 * 4 == rec.rows("tp", 1)[0].saved_bytes("mlp", True) // 2
    # TP alone repeats the LayerNorm on every rank; SP gives each rank S/N tokens of it
    assert tp.saved_bytes("layernorm") == rec.rows("tp", 1)[0].saved_bytes("layernorm") == 16 * 2 * 34 * 4
    assert sp.saved_bytes("layernorm") == tp.saved_bytes("layernorm") // 2


def test_tp_issues_one_all_reduce_each_way(rec):
    act = 16 * 2 * 32 * 4
    for r in rec.rows("tp", 2):
        assert [(c.op, c.phase, c.in_bytes, c.out_bytes) for c in r.collectives] == [
            ("all_reduce", "forward", act, act), ("all_reduce", "backward", act, act)]
    assert all(not r.collectives for m in T.MODES for r in rec.rows(m, 1))


def test_sp_swaps_each_all_reduce_for_gather_and_scatter_at_equal_bytes(rec):
    act = 16 * 2 * 32 * 4
    for r in rec.rows("tp+sp", 2):
        assert [(c.op, c.phase, c.in_bytes, c.out_bytes) for c in r.collectives] == [
            ("all_gather", "forward", act // 2, act), ("reduce_scatter", "forward", act, act // 2),
            ("all_gather", "backward", act // 2, act), ("reduce_scatter", "backward", act, act // 2),
            ("all_reduce", "grad sync", 3 * 32 * 4, 3 * 32 * 4)]
    tp, sp = rec.rows("tp", 2)[0], rec.rows("tp+sp", 2)[0]
    # ring: all-reduce = reduce-scatter + all-gather, 2·(N−1)/N of the tensor per rank
    assert tp.comm_bytes() == sp.comm_bytes() == expected(CFG, 2, "tp")["ring bytes per step"] == 4 * (2 - 1) / 2 * act
    assert sp.comm_bytes(phases=("grad sync",)) == expected(CFG, 2, "tp+sp")["grad sync ring bytes"]
    assert tp.collectives[0].ring_bytes(2) == sum(c.ring_bytes(2) for c in sp.collectives[:2])


def test_record_round_trips_through_json(rec, tmp_path):
    path = R.save(rec, tmp_path / "tp.json")
    assert R.load(path) == rec
    assert R.load(path, expect=T.TensorParallelRecord).checks == rec.checks


def test_bad_sizes_fail_before_any_rank_runs(cluster2):
    with pytest.raises(ValueError, match="from 1 to 2"):
        T.measure_tensor_parallel(cluster=cluster2, tp_sizes=(3,))
    with pytest.raises(ValueError, match="must divide"):
        T.measure_tensor_parallel(cluster=cluster2, tp_sizes=(2,), seq=7)


def test_figures_draw_the_record(rec):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.lessons.tensor_parallel.plots import (
        plot_bytes_per_rank, plot_comm, plot_weight_shards,
    )

    assert len(plot_weight_shards(rec, 2).patches) == 4               # W1 and W2, 2 shards each
    heights = [p.get_height() for p in plot_bytes_per_rank(rec).patches]
    assert len(heights) == 3 * 2 * 2 and heights[2] == pytest.approx(2 * heights[3])   # hidden, N=1 vs 2
    bars = plot_comm(rec, 2).patches
    assert sum(p.get_width() for p in bars[:2]) == pytest.approx(8.0)        # KiB, TP
    assert sum(p.get_width() for p in bars[2:6]) == pytest.approx(8.0)       # KiB, SP (no grad sync)
    plt.close("all")

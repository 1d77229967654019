"""torch.distributed's primitives on live gloo ranks: values and recorded provenance."""
from __future__ import annotations

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from dpviz.lessons.collectives.primitives import PRIMITIVES, ranks_in, record_primitives  # noqa: E402
from dpviz.engine.launch import Cluster  # noqa: E402
from dpviz.lessons.collectives.plots import plot_primitive  # noqa: E402
from dpviz.plots.legibility import names_not_drawn, overlapping_texts, small_texts  # noqa: E402
from dpviz.plots.style import COLUMN_IN  # noqa: E402
from dpviz.core.record import load, save  # noqa: E402

N, K, ROOT = 3, 2, 1  # three ranks (not a power of two), a non-zero root


@pytest.fixture(scope="module")
def prims():
    with Cluster(N) as cluster:
        return record_primitives(cluster=cluster, elements=K, root=ROOT)


def arr(values) -> np.ndarray:
    return np.array(values, dtype=float)


def test_ranks_in_decodes_powers_of_two():
    assert ranks_in(1 + 4 + 8) == (0, 2, 3) and ranks_in(2.0) == (1,)


def test_every_primitive_is_recorded(prims):
    assert [r.name for r in prims.runs] == list(PRIMITIVES)


def test_broadcast_copies_the_root_everywhere(prims):
    run = prims.get("broadcast")
    assert all(after == run.before[ROOT] for after in run.after)
    assert all(src == (ROOT,) for rank in run.after_from for src in rank)


def test_scatter_gives_rank_r_the_roots_r_th_slice(prims):
    run = prims.get("scatter")
    assert all(run.before[r] == () for r in range(N) if r != ROOT)
    for r in range(N):
        assert run.after[r] == run.before[ROOT][r * K:(r + 1) * K]


def test_gather_concatenates_every_rank_at_the_root(prims):
    run = prims.get("gather")
    assert run.after[ROOT] == sum(run.before, ())
    assert run.after_from[ROOT] == tuple((r,) for r in range(N) for _ in range(K))
    assert all(run.after[r] == () for r in range(N) if r != ROOT)


@pytest.mark.numeric
@pytest.mark.parametrize("name", ["reduce", "all_reduce"])
def test_reductions_sum_every_rank(prims, name):
    run = prims.get(name)
    total = arr(run.before).sum(axis=0)
    holders = [ROOT] if name == "reduce" else range(N)
    for r in holders:
        np.testing.assert_array_equal(arr(run.after[r]), total)
        assert all(src == tuple(range(N)) for src in run.after_from[r])


@pytest.mark.numeric
def test_reduce_scatter_leaves_rank_r_the_sum_of_slice_r(prims):
    run = prims.get("reduce_scatter")
    total = arr(run.before).sum(axis=0)
    for r in range(N):
        np.testing.assert_array_equal(arr(run.after[r]), total[r * K:(r + 1) * K])


def test_all_gather_gives_everyone_everything(prims):
    run = prims.get("all_gather")
    assert all(after == sum(run.before, ()) for after in run.after)


def test_barrier_releases_no_rank_before_the_last_arrives(prims):
    run = prims.get("barrier")
    assert sorted(run.arrive_ms) == list(run.arrive_ms)  # rank r worked r × 50 ms first
    assert min(run.leave_ms) >= max(run.arrive_ms)


def test_record_round_trips_and_draws(prims, tmp_path):
    assert load(save(prims, tmp_path / "primitives.json")) == prims
    for name in PRIMITIVES:
        ax = plot_primitive(prims, name)
        assert name in ax.get_title(loc="left")
        # no wider than a notebook column (shown unscaled), every value readable
        assert ax.figure.get_figwidth() <= COLUMN_IN and small_texts(ax.figure) == []
        assert overlapping_texts(ax.figure) == []
        # the legend names only inputs the figure draws: a scatter's come from its root alone
        assert names_not_drawn(ax.figure) == []
    legend = [t.get_text() for t in plot_primitive(prims, "scatter").get_legend().get_texts()]
    assert legend == [f"rank {ROOT}'s input"]


@pytest.mark.parametrize("kwargs,message", [(dict(elements=0), "elements"), (dict(root=5), "root")])
def test_bad_input_is_rejected_before_spawning(kwargs, message):
    with pytest.raises(ValueError, match=message):
        record_primitives(world_size=2, **kwargs)

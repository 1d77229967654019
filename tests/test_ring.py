"""All-reduce algorithms: schedules and the numpy model (pure), then live gloo ranks."""
from __future__ import annotations

import json
import math

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from dpviz.app.cli import main as cli_main  # noqa: E402
from dpviz.lessons.collectives import (
    ALGORITHMS, build, demo_inputs, holds_per_step, model_collective,
)  # noqa: E402,E501
from dpviz.lessons.collectives.execute import record_collective, record_rank  # noqa: E402
from dpviz.lessons.collectives.schedule import apply_holds, chunk_bounds, initial_holds, make_steps  # noqa: E402
from dpviz.engine.launch import Cluster  # noqa: E402
from dpviz.lessons.collectives.plots import collective_frames, plot_collective_step, plot_traffic  # noqa: E402
from dpviz.core.record import RecordError, load, save  # noqa: E402
from matplotlib import patheffects  # noqa: E402
from matplotlib.patches import FancyArrowPatch  # noqa: E402

N = 4


def sum_over(inputs: np.ndarray, ranks, start: int, stop: int) -> np.ndarray:
    return inputs[sorted(ranks), start:stop].sum(axis=0)


# --- pure: schedules and the model --------------------------------------------------------

@pytest.mark.parametrize("elements,parts", [(16, 4), (10, 4), (7, 3), (5, 5), (1, 1)])
def test_chunks_cover_the_buffer_and_differ_by_at_most_one(elements, parts):
    bounds = chunk_bounds(elements, parts)
    assert bounds[0][0] == 0 and bounds[-1][1] == elements
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [b - a for a, b in bounds]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_ring_is_reduce_scatter_then_all_gather_each_rank_one_chunk_right(n):
    schedule = build("ring", n, 3 * n + 1)
    assert len(schedule.steps) == 2 * (n - 1)
    assert [s.phase for s in schedule.steps] == ["reduce_scatter"] * (n - 1) + ["all_gather"] * (n - 1)
    for step in schedule.steps:
        assert sorted(t.src for t in step.transfers) == list(range(n))
        assert all(t.dst == (t.src + 1) % n for t in step.transfers)
        assert all(t.op == ("add" if step.phase == "reduce_scatter" else "copy") for t in step.transfers)


@pytest.mark.parametrize("n", range(2, 9))
def test_tree_takes_2_ceil_log2_n_steps(n):
    assert len(build("tree", n, 8).steps) == 2 * math.ceil(math.log2(n))


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("n,elements", [(2, 4), (3, 7), (4, 10), (5, 5), (6, 13)])
def test_model_sums_exactly_what_the_holds_say_at_every_step(algorithm, n, elements):
    inputs = demo_inputs(n, elements, seed=n)
    record = model_collective(algorithm, inputs)
    for step, holds in zip(record.steps, holds_per_step(record)[1:]):
        for rank in range(n):
            for c, (start, stop) in enumerate(record.chunks):
                np.testing.assert_array_equal(step.values[rank][c], sum_over(inputs, holds[rank][c], start, stop))
    assert all(h == frozenset(range(n)) for rank in holds_per_step(record)[-1] for h in rank)
    np.testing.assert_array_equal(np.array(record.result), np.tile(inputs.sum(axis=0), (n, 1)))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_traffic_per_rank_matches_the_formulas(n):
    s = 4 * n * 6  # bytes; divisible by N so every ring chunk is S/N
    elements = s // 4
    ring = build("ring", n, elements).bytes_sent_per_rank
    assert ring == (2 * (n - 1) * s // n,) * n
    assert build("ring-unchunked", n, elements).bytes_sent_per_rank == ((n - 1) * s,) * n
    assert build("naive", n, elements).bytes_sent_per_rank == ((n - 1) * s,) + (s,) * (n - 1)


def test_uneven_ring_still_sends_2_n_minus_1_times_s_in_total():
    schedule = build("ring", 4, 10)
    assert sum(schedule.bytes_sent_per_rank) == 2 * 3 * 10 * 4
    assert len(set(schedule.bytes_sent_per_rank)) > 1  # chunks of 3, 3, 2, 2 elements


def test_a_schedule_that_counts_a_rank_twice_is_rejected():
    holds = initial_holds(2, 1)
    steps = make_steps([("reduce", [(0, 1, 0, "add")])], 2, ((0, 4),))
    with pytest.raises(ValueError, match="twice"):
        apply_holds(apply_holds(holds, steps[0].transfers), steps[0].transfers)


@pytest.mark.parametrize("args,message", [
    (("ring", 1, 8), "at least 2 ranks"), (("tree", 4, 0), "elements must be >= 1"),
    (("bogus", 4, 8), "unknown algorithm"), (("ring", 4, 3), "at least 4 elements")])
def test_bad_requests_are_rejected_before_anything_runs(args, message):
    with pytest.raises(ValueError, match=message):
        build(*args)
    with pytest.raises(ValueError, match=message):
        record_collective(args[0], elements=args[2], world_size=args[1])  # would spawn if not rejected


# --- live ranks -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    with Cluster(N) as c:
        yield c


@pytest.fixture(scope="module")
def live(cluster):
    return {(a, e): record_collective(a, elements=e, cluster=cluster, seed=1) for a in ALGORITHMS for e in (16, 10)}


@pytest.mark.numeric
@pytest.mark.parametrize("elements", [16, 10])
def test_live_ring_equals_model_and_dist_all_reduce(live, elements):
    record = live["ring", elements]
    assert record.source == "live" and record.matches_all_reduce is True and record.max_abs_diff == 0
    model = model_collective("ring", np.array(record.inputs))
    assert record.steps == model.steps  # transfers and every value of every step
    assert record.bytes_sent_per_rank == model.bytes_sent_per_rank  # counted by the ranks
    np.testing.assert_array_equal(np.array(record.result),
                                  np.tile(np.array(record.inputs).sum(axis=0), (N, 1)))


def test_live_ring_sends_2_n_minus_1_over_n_of_s(live):
    record = live["ring", 16]
    assert record.bytes_sent_per_rank == (2 * (N - 1) * record.total_bytes // N,) * N


@pytest.mark.parametrize("algorithm", ["tree", "naive", "ring-unchunked"])
def test_live_contrast_algorithms_equal_their_model(live, algorithm):
    for elements in (16, 10):
        record = live[algorithm, elements]
        assert record.matches_all_reduce is True
        assert record.steps == model_collective(algorithm, np.array(record.inputs)).steps


def test_live_unchunked_ring_sends_n_minus_1_times_s_and_naive_loads_rank_0(live):
    s = live["ring", 16].total_bytes
    assert live["ring-unchunked", 16].bytes_sent_per_rank == ((N - 1) * s,) * N
    assert live["naive", 16].bytes_sent_per_rank == ((N - 1) * s,) + (s,) * (N - 1)


@pytest.mark.numeric
def test_live_ring_on_random_floats_matches_all_reduce_within_rounding(cluster):
    inputs = np.random.default_rng(3).standard_normal((N, 1000)).astype(np.float32)
    schedule = build("ring", N, 1000)
    results = cluster.run_task(record_rank, schedule, inputs.tolist())
    assert all(r["matches"] for r in results)
    model = model_collective("ring", inputs)  # same order of float32 adds: bit for bit
    assert tuple(results[0]["values"][-1]) == model.steps[-1].values[0]


def test_record_round_trips_through_json(live, tmp_path):
    record = live["ring", 10]
    assert load(save(record, tmp_path / "ring.json")) == record


def test_frames_and_step_figure_show_every_message(live):
    record = live["ring", 16]
    frames = collective_frames(record)
    assert len(frames) == len(record.steps) + 1
    assert frames[-1].holds[0][0] == tuple(range(N))
    ax = plot_collective_step(record, 1)
    assert len(ax.patches) == len(record.steps[0].transfers)  # one arrow per message
    assert sum(len(c.get_paths()) for c in ax.collections) >= 2 * N * record.elements  # stripes, cells
    ax = plot_traffic([live[a, 16] for a in ALGORITHMS])
    assert len(ax.patches) == N * len(ALGORITHMS)


@pytest.mark.parametrize("algorithm", ["ring", "tree"])
def test_a_messages_arrow_never_hides_a_cells_value(live, algorithm):
    """Issue 42 item 12: the arrows bend across the rows between sender and receiver, over
    other cells' numbers. Every value is drawn above every arrow, with a halo of the page's
    white, so where an arrow passes a number the number stays whole."""
    record = live[algorithm, 16]
    ax = plot_collective_step(record, 1)
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    values = [t for t in ax.texts if t.get_text().replace(".", "", 1).lstrip("-").isdigit()]
    assert arrows and len(values) == N * record.elements
    assert min(t.get_zorder() for t in values) > max(a.get_zorder() for a in arrows)
    assert all(any(isinstance(e, patheffects.withStroke) for e in t.get_path_effects()) for t in values)


def test_widget_steps_through_inputs_and_every_step(live):
    from dpviz.lessons.collectives.widgets import collective_player

    panel = collective_player(live["ring", 16])
    slider = panel.children[0].children[1]
    assert slider.max == len(live["ring", 16].steps)
    slider.value = 3  # redraws without error


# --- CLI ------------------------------------------------------------------------------------

def test_cli_ring_writes_the_documented_record(tmp_path, capsys):
    assert cli_main(["ring", "--ranks", "2", "--elements", "5", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "ring.json").read_text())
    assert data["world_size"] == 2 and data["algorithm"] == "ring" and data["matches_all_reduce"] is True
    assert [s["phase"] for s in data["steps"]] == ["reduce_scatter", "all_gather"]
    assert {"transfers", "values"} <= set(data["steps"][0])
    assert data["bytes_sent_per_rank"] == [20, 20]  # each rank sends the 3-float and the 2-float chunk
    assert "equals dist.all_reduce: yes" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["ring", "--ranks", "1"], "at least 2 ranks"),
    (["ring", "--elements", "0"], "must be >= 1"),
    (["ring", "--algorithm", "butterfly"], "invalid choice"),
])
def test_cli_ring_rejects_bad_input(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv + ["--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_animate_rejects_an_unreadable_record(tmp_path, capsys):
    bad = tmp_path / "ring.json"
    bad.write_text('{"kind": "collective", ')
    with pytest.raises(SystemExit) as exit_:
        cli_main(["animate", "ring", "--record", str(bad), "--dry-run"])
    assert exit_.value.code == 2 and "not readable JSON" in capsys.readouterr().err
    with pytest.raises(RecordError):
        load(bad)


@pytest.mark.manim
def test_ring_scene_builds_from_a_live_record(live, tmp_path):
    from dpviz.app.animate import render

    path = save(live["ring", 16], tmp_path / "ring.json")
    assert render("ring", path, dry_run=True) is None

"""Pipeline parallelism on live ranks: schedules, one shared clock, gradients, the bubble."""
from __future__ import annotations

import subprocess
import sys

import pytest

from dpviz.core.config import RunConfig
from dpviz.core.record import load, save
from dpviz.lessons.pipeline import live as P
from dpviz.lessons.pipeline.records import gpipe_formula

SMALL = RunConfig(layers=4, width=64, batch_per_rank=256, profile=False)


@pytest.fixture(scope="module")
def sweep(cluster2):
    return P.sweep_pipeline(cluster=cluster2, micro_batches=(1, 4), schedules=("gpipe", "1f1b"),
                            repeats=3, cfg=SMALL)


def test_schedules_run_every_op_once_in_dependency_order():
    for sched in P.SCHEDULES:
        for stages, m in ((2, 1), (2, 4), (4, 8), (4, 2)):
            for s in range(stages):
                ops = P.schedule_ops(sched, s, stages, m)
                assert sorted(ops) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
                assert all(ops.index(("F", i)) < ops.index(("B", i)) for i in range(m))
    assert P.schedule_ops("1f1b", 0, 2, 3) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)]
    assert P.schedule_ops("gpipe", 1, 2, 2) == [("F", 0), ("F", 1), ("B", 1), ("B", 0)]
    assert [len(b) for b in P.stage_blocks(5, 2)] == [3, 2]
    assert gpipe_formula(2, 1) == 0.5 and gpipe_formula(4, 5) == pytest.approx(3 / 8)


@pytest.mark.numeric
def test_gradients_equal_one_process(sweep):
    bound = P.rounding_bound(SMALL)                 # micro-batches re-order the batch sums
    for run in sweep.runs:
        assert run.max_grad_diff <= bound, (run.schedule, run.micro_batches)


def test_ranks_share_one_clock_by_causality(sweep):
    # a stage cannot start micro-batch i before its neighbour finished it and sent the result:
    # if the ranks' perf_counter clocks disagreed, some of these would fail
    for run in sweep.runs:
        for step in run.steps:
            ev = {(e.rank, e.kind, e.micro): e for e in step.events}
            assert len(ev) == 2 * run.stages * run.micro_batches
            for i in range(run.micro_batches):
                for s in range(1, run.stages):
                    assert ev[s, "forward", i].start_ms >= ev[s - 1, "forward", i].end_ms
                    assert ev[s - 1, "backward", i].start_ms >= ev[s, "backward", i].end_ms
                    assert ev[s, "backward", i].start_ms >= ev[s, "forward", i].end_ms


def test_bubble_is_structural_and_never_beats_the_formula_at_m1(sweep):
    for run in sweep.runs:
        for step in run.steps:
            assert all(0 <= b < 1 for b in step.bubble)
            assert step.makespan_ms >= max(step.busy_ms)
        # with one micro-batch a stage can only work while the other waits: idle ≥ (p−1)/p
    for sched in P.SCHEDULES:
        one = sweep.run(sched, 1)
        assert all(s.mean_bubble >= one.formula - 1e-9 for s in one.steps)


def test_1f1b_holds_fewer_micro_batches_than_gpipe(sweep):
    gpipe, f1b = sweep.run("gpipe", 4), sweep.run("1f1b", 4)
    assert gpipe.peak_in_flight == (4, 4)              # every micro-batch's activations at once
    assert f1b.peak_in_flight == (2, 1)                # at most p − s in flight on stage s
    assert all(a < b for a, b in zip(f1b.peak_saved_bytes, gpipe.peak_saved_bytes))
    # GPipe holds the whole batch's activations whatever m is: m=4 saves what m=1 saves
    assert gpipe.peak_saved_bytes == sweep.run("gpipe", 1).peak_saved_bytes


def test_record_round_trips_and_loads_without_torch(sweep, tmp_path):
    path = save(sweep, tmp_path / "pipe.json")
    assert load(path) == sweep
    code = ("import sys; sys.modules['torch'] = None\n"
            "from dpviz.core.record import load\n"
            f"r = load({str(path)!r}); print(len(r.runs), round(r.runs[0].formula, 3))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(len(sweep.runs)), "0.5"]


def test_bad_input_is_refused(cluster2):
    with pytest.raises(ValueError, match="schedule"):
        P.run_pipeline(SMALL, cluster=cluster2, micro_batches=2, schedule="zigzag")
    with pytest.raises(ValueError, match="micro_batches"):
        P.run_pipeline(SMALL, cluster=cluster2, micro_batches=0)
    with pytest.raises(ValueError, match="empty"):
        P.run_pipeline(SMALL, cluster=cluster2, micro_batches=512)
    with pytest.raises(ValueError, match="layers >= ranks"):
        P.run_pipeline(SMALL.replace(layers=1), cluster=cluster2, micro_batches=2)


def test_figures_draw_the_record(sweep):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.lessons.pipeline.plots import plot_bubble, plot_gantt, plot_in_flight

    run = sweep.run("gpipe", 4)
    ax = plot_gantt(run)
    # one idle background per stage + one bar per event
    assert len(ax.collections) == run.stages + len(run.best_step.events)
    assert ax.get_xlim() == pytest.approx((0, run.best_step.makespan_ms))
    ax = plot_bubble(sweep)
    measured = [l for l in ax.lines if l.get_label().startswith("gpipe: measured")][0]
    assert list(measured.get_ydata()) == [sweep.run("gpipe", m).bubble for m in (1, 4)]
    assert len(plot_in_flight(sweep).lines) == 2
    plt.close("all")

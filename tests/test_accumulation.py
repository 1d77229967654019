"""Gradient accumulation on live ranks: the schedule in the trace, the gradient, the pitfalls."""
from __future__ import annotations

import json

import matplotlib
import pytest

from dpviz import load, run
from dpviz.analysis.overlap import steady_steps
from dpviz.app.cli import main as cli
from dpviz.core.config import RunConfig
from dpviz.core.rounding import gradient_bound, relative_bound
from dpviz.engine.workloads import reference_sgd_bound
from dpviz.lessons.accumulation.live import (
    DEMO_CONFIG, check_accum_values, check_gradients, compare_scopes, sweep_accumulation,
)
from dpviz.lessons.accumulation.records import (
    AccumulationSweep, accumulation_row, describe_accumulation_sweep, describe_scopes,
    micro_step_counts, run_lengths, with_gradients,
)

matplotlib.use("Agg")
K = 3
CFG = DEMO_CONFIG.replace(steps=3, accum_steps=K)


@pytest.fixture(scope="module")
def k3(cluster2, tmp_path_factory):
    """K = 3, no_sync around forward and backward: the right way. Saved like `dpviz run`."""
    out = tmp_path_factory.mktemp("k3")
    return run(CFG, cluster=cluster2, out=out), out / "record.json"


@pytest.fixture(scope="module")
def scopes(cluster2):
    return compare_scopes(CFG, cluster=cluster2)


def buckets_in(record, step: int, micro: int, rank: int = 0):
    return [b for b in record.buckets if (b.rank, b.step, b.micro_step) == (rank, step, micro)]


def test_record_holds_every_micro_step_with_its_span_and_trace_count(k3):
    record, path = k3
    assert [(m.step, m.micro_step) for m in record.micro_steps] == \
        [(s, m) for s in range(CFG.steps) for m in range(K)]
    for m in record.micro_steps:
        span, = [s for s in record.spans_of(0, "micro_step", m.step) if s.name.endswith(f"#{m.micro_step}")]
        assert (span.start_us, span.end_us) == (m.start_us, m.end_us)
        # counted from the trace, it matches what the comm hook was handed
        assert m.all_reduces == len(buckets_in(record, m.step, m.micro_step))
    for step in record.steps:
        counts = micro_step_counts(record, step)
        assert counts[:-1] == (0,) * (K - 1) and counts[-1] >= 1
        assert counts[-1] == len(record.spans_of(0, "allreduce", step))
    assert max(micro_step_counts(record, s)[-1] for s in steady_steps(record)) > 1  # several buckets
    saved = json.loads(path.read_text())
    assert saved["micro_steps"][K - 1]["all_reduces"] == record.micro_steps[K - 1].all_reduces
    assert load(path).micro_steps == record.micro_steps


@pytest.mark.numeric
def test_accumulated_training_equals_large_batch_sgd(k3):
    record, _ = k3
    bound = reference_sgd_bound(RunConfig.from_dict(record.config))  # float32 re-ordering
    for check in record.checks:
        assert check.max_diff_across_ranks == 0.0  # exact: every rank receives the same all-reduce
        assert check.max_diff_vs_single_process <= bound


@pytest.mark.numeric
def test_accumulated_gradient_equals_one_process_on_the_large_batch(cluster2):
    check = check_gradients(CFG, cluster=cluster2)
    assert check.all_reduces_per_micro == (0, 0, 1)  # DDP's first iteration: one bucket
    assert check.max_diff_across_ranks == 0.0  # exact: every rank receives the same all-reduce
    assert check.max_diff_vs_large_batch <= gradient_bound(CFG, check.reference_max_abs)
    assert check.norm_ratio == pytest.approx(1.0, abs=relative_bound(CFG))


@pytest.mark.numeric
@pytest.mark.parametrize("k", [2, 4])
def test_without_1_over_k_the_gradient_is_k_times_too_large(cluster2, k):
    check = check_gradients(CFG.replace(accum_steps=k, scale_loss=False), cluster=cluster2)
    assert check.norm_ratio == pytest.approx(k, rel=relative_bound(CFG))
    assert check.max_diff_vs_large_batch > 0.1 * check.reference_max_abs
    assert check.max_diff_across_ranks == 0.0  # wrong, but identically wrong on every rank


@pytest.mark.numeric
def test_without_1_over_k_training_leaves_large_batch_sgd(cluster2):
    cfg = CFG.replace(scale_loss=False, steps=1)
    record = run(cfg, cluster=cluster2)
    assert record.checks[0].max_diff_across_ranks == 0.0
    # far beyond what rounding can do: the bound is 1 step's re-ordering
    assert record.checks[0].max_diff_vs_single_process > 100 * reference_sgd_bound(cfg)


@pytest.mark.numeric
def test_no_sync_around_backward_only_or_nowhere_syncs_every_micro_step(scopes):
    right = scopes["forward_backward"]
    step = steady_steps(right)[-1]
    n_buckets = micro_step_counts(right, step)[-1]
    assert micro_step_counts(right, step) == (0,) * (K - 1) + (n_buckets,)
    for scope in ("backward_only", "off"):
        record = scopes[scope]
        assert micro_step_counts(record, step) == (n_buckets,) * K
        assert accumulation_row(record).bytes_per_step == K * accumulation_row(right).bytes_per_step
    for record in scopes.values():  # the gradients stay right: only the traffic is K times
        bound = reference_sgd_bound(RunConfig.from_dict(record.config))
        assert max(c.max_diff_vs_single_process for c in record.checks) <= bound
    assert "backward_only" in describe_scopes(scopes)


def test_misplaced_no_sync_numbers_buckets_per_micro_step(scopes):
    record = scopes["backward_only"]
    step = steady_steps(record)[-1]
    n_buckets = micro_step_counts(record, step)[-1]
    for micro in range(K):
        spans = [s for s in record.spans_of(0, "allreduce_launch", step)
                 if micro_window(record, step, micro)[0] <= s.start_us < micro_window(record, step, micro)[1]]
        assert sorted(s.bucket for s in spans) == list(range(n_buckets))


def micro_window(record, step, micro):
    m, = [m for m in record.micro_steps if (m.step, m.micro_step) == (step, micro)]
    return m.start_us, m.end_us


@pytest.mark.numeric
def test_gradient_check_sees_the_pitfall_in_the_hook_and_right_gradients(cluster2):
    check = check_gradients(CFG.replace(no_sync="backward_only"), cluster=cluster2)
    assert all(n >= 1 for n in check.all_reduces_per_micro)
    assert check.norm_ratio == pytest.approx(1.0, abs=relative_bound(CFG))


def test_sweep_traffic_is_constant_per_step_and_falls_as_1_over_k_per_sample(cluster2, tmp_path):
    from dpviz.core.record import save

    result = sweep_accumulation(CFG.replace(steps=2), cluster=cluster2, ks=[1, 2, 4])
    rows = result.rows
    assert [r.accum_steps for r in rows] == [1, 2, 4]
    param_bytes = run(CFG.replace(steps=1, accum_steps=1, profile=False), cluster=cluster2).param_bytes
    for r in rows:
        assert r.bytes_per_step == sum(param_bytes)  # every gradient all-reduced once per step
        assert r.all_reduces_per_micro[:-1] == (0,) * (r.accum_steps - 1)
        assert r.all_reduces_per_step == rows[0].all_reduces_per_step
        assert r.samples_per_step == CFG.batch_per_rank * r.accum_steps * 2
        assert r.bytes_per_sample * r.accum_steps == pytest.approx(rows[0].bytes_per_sample)
        assert r.ms_per_sample == pytest.approx(r.step_ms / r.samples_per_step)
    checked = with_gradients(result, [check_gradients(CFG, cluster=cluster2)])
    path = save(checked, tmp_path / "accumulation.json")
    assert load(path, expect=AccumulationSweep) == checked
    assert " 0×3, " in describe_accumulation_sweep(checked)   # K=4: three silent micro-steps, then the buckets


def test_bad_input_is_rejected_before_ranks_start():
    with pytest.raises(ValueError, match="at least one K"):
        check_accum_values([])
    with pytest.raises(ValueError, match="accum_steps must be between 1 and 1024"):
        check_accum_values([1, 0])
    with pytest.raises(ValueError, match="accum_steps >= 2"):
        compare_scopes(CFG.replace(accum_steps=1))


def test_micro_step_counts_names_a_missing_step(k3):
    with pytest.raises(ValueError, match="step 99 has no micro-steps"):
        micro_step_counts(k3[0], 99)


def test_figures_draw_what_the_records_hold(k3, scopes, cluster2):
    import matplotlib.pyplot as plt

    from dpviz.lessons.accumulation.plots import plot_gradient_ratio, plot_schedule, plot_scopes

    record, _ = k3
    step = steady_steps(record)[-1]
    ax = plot_schedule(record)
    assert run_lengths(micro_step_counts(record, step)) in ax.get_title(loc="left")
    ax = plot_scopes(scopes)
    heights = [p.get_height() for p in ax.patches]
    assert heights == [n for r in scopes.values() for n in micro_step_counts(r, step)]
    checks = [check_gradients(CFG.replace(accum_steps=k, scale_loss=False), cluster=cluster2) for k in (1, 2)]
    ax = plot_gradient_ratio(checks)
    assert list(ax.lines[0].get_ydata()) == [c.norm_ratio for c in checks]
    plt.close("all")


def test_k_slider_reruns_live(cluster2):
    from dpviz import k_slider

    matplotlib.use("module://matplotlib_inline.backend_inline")  # the notebook's backend
    try:
        panel = k_slider(cluster2, CFG, values=(1, 2), value=2)
        slider, status = panel.children[0].children
        assert slider.options == (("1", 1), ("2", 2)) and "K=2: re-ran live" in status.value
        slider.value = 1
        assert "K=1: re-ran live" in status.value
    finally:
        matplotlib.use("Agg")


def test_cli_writes_the_sweep_record(tmp_path, capsys):
    assert cli(["accumulation", "--ranks", "2", "--k", "1,2", "--steps", "2", "--out", str(tmp_path)]) == 0
    record = load(tmp_path / "accumulation.json", expect=AccumulationSweep)
    assert [r.accum_steps for r in record.rows] == [1, 2]
    assert {(c.accum_steps, c.scale_loss) for c in record.gradients} == {(1, True), (1, False), (2, True), (2, False)}
    assert "wrote" in capsys.readouterr().out


@pytest.mark.manim
def test_accumulation_scene_renders_from_a_real_record(k3):
    from dpviz.app.animate import render

    assert render("accumulation", k3[1], dry_run=True) is None


def test_run_lengths_keep_the_counts_short_at_any_k():
    assert run_lengths([4]) == "4"
    assert run_lengths([0] * 7 + [4]) == "0×7, 4"
    assert run_lengths([4, 4, 4]) == "4×3"


def test_link_slider_says_when_a_move_started_or_restarted_ranks():
    """04's link-bandwidth slider (the same widget code as 03's) re-runs at K micro-steps; its
    status line says when a move had to start ranks, and how long that took."""
    from dpviz.engine.launch import Cluster
    from dpviz.lessons.accumulation.live import accumulation_link_slider

    cluster = Cluster(2)   # not started yet: the first draw starts it
    try:
        panel = accumulation_link_slider(cluster, CFG.replace(link="classroom"), k=2, gbps=(0.5, 4.0))
        slider, status = panel.children[0].children
        assert "link Gb/s=0.5: re-ran live" in status.value and "; started 2 ranks in " in status.value
        slider.value = 4.0   # warm: nothing started
        assert "link Gb/s=4: re-ran live" in status.value and "started" not in status.value
        cluster.close()      # as a Run All that closes its cluster would
        slider.value = 0.5
        assert "; restarted 2 ranks in " in status.value and cluster.starts == 2
        seconds = float(status.value.split("restarted 2 ranks in ")[1].split(" s")[0])
        assert seconds == round(cluster.start_seconds, 2) and seconds > 0
        with pytest.raises(ValueError, match="no emulated link"):
            accumulation_link_slider(cluster, CFG.replace(link=None))
    finally:
        cluster.close()


def test_a_k_slider_move_runs_two_steps_profiles_the_last_and_skips_the_checks():
    """The schedule draws no parameter check: a move skips their all_gather (as 03's cap
    slider does) and runs the rebuild step unprofiled and the one steady step it draws."""
    from dpviz.lessons.accumulation.live import DEMO_CONFIG, live_config

    live = live_config(DEMO_CONFIG.replace(accum_steps=3))
    assert (live.steps, live.profile_from, live.checks, live.accum_steps) == (2, 1, False, 3)

"""Buckets: the greedy model, DDP's real layout (hook, logging, torch's own assignment),
per-step timing facts, the sweep's maths and record, the CLI, the slider and the scene."""
from __future__ import annotations

import random

import numpy as np
import pytest

from dpviz import RunConfig, load, run, save
from dpviz.analysis.overlap import steady_steps
from dpviz.core.bucket_layout import (
    FIRST_BUCKET_BYTES, ONE_BUCKET_CAP_MB, assign_buckets, cap_limits,
)
from dpviz.core.record import Bucket, RunRecord, Span
from dpviz.lessons.buckets.live import sweep_buckets, sweep_config, torch_assignment
from dpviz.lessons.buckets.records import (
    BucketSweep, CapRow, cap_row, format_sweep, logged_layout, minus, modelled_layout, predictions,
    step_buckets, step_timeline,
)

MIB = 1 << 20
SMALL = dict(layers=6, width=128, batch_per_rank=16, steps=3)  # 64 KiB per layer: quick


# --- the pure model -----------------------------------------------------------------------

def test_assign_buckets_closes_a_bucket_once_it_reaches_its_limit():
    assert assign_buckets([4, 4, 4], [8]) == [[0, 1], [2]]
    assert assign_buckets([10, 1, 1], [8]) == [[0], [1, 2]]           # one gradient overshoots
    assert assign_buckets([3, 3, 3, 3, 3], [3, 9]) == [[0], [1, 2, 3], [4]]  # first bucket's own limit
    assert assign_buckets([], [8]) == []
    with pytest.raises(ValueError, match="positive byte counts"):
        assign_buckets([1], [])


def test_cap_limits_only_the_default_has_a_1mib_first_bucket():
    assert cap_limits(None) == [MIB, 25 * MIB]
    assert cap_limits(4) == [4 * MIB]
    assert cap_limits(0.25) == [MIB // 4]


def test_minus_keeps_what_the_cover_leaves():
    assert minus([(0, 10)], [(2, 3), (5, 7)]) == [(0, 2), (3, 5), (7, 10)]
    assert minus([(0, 10)], [(-1, 11)]) == []
    assert minus([(0, 4), (6, 8)], []) == [(0, 4), (6, 8)]
    assert minus([(0, 4)], [(4, 9)]) == [(0, 4)]


def _synthetic(step_ms: list[float], comm: list[tuple[float, float]], backward=(0.0, 5.0)) -> RunRecord:
    """A hand-made 1-rank record: step s lasts step_ms[s] ms, backward 0–5 ms into it, one
    all-reduce (comm[s], ms) — the sweep maths checked on numbers we can do by hand."""
    spans, buckets, t = [], [], 0.0
    for s, (dur, (c0, c1)) in enumerate(zip(step_ms, comm)):
        us = lambda ms: (t + ms) * 1e3
        spans += [Span(0, "main", f"dpviz:step#{s}", "step", us(0), us(dur), step=s),
                  Span(0, "main", "bw", "backward", us(backward[0]), us(backward[1]), step=s),
                  Span(0, "gloo", "gloo:all_reduce", "allreduce", us(c0), us(c1), step=s, bucket=0)]
        buckets.append(Bucket(0, s, 0, 0, 10, 40, ("w",), us(backward[1] - 1)))
        t += dur
    return RunRecord(config={"bucket_cap_mb": 2.0}, world_size=1, spans=tuple(spans),
                     buckets=tuple(buckets), micro_steps=(), losses={}, checks=(), ddp_logging={})


def test_cap_row_takes_medians_over_steady_steps_of_every_repeat():
    # step 0 (left out) is absurd; steady steps, backward 0–5 ms: comm 4–8 ms (1 ms under
    # backward, 3 exposed), 3–9 (2 under, 4 exposed), 2–6 (3 under, 1 exposed)
    a = _synthetic([999, 10, 12], [(0, 999), (4, 8), (3, 9)])
    b = _synthetic([999, 20], [(0, 999), (2, 6)])
    row = cap_row(a, b)
    assert row.samples == 3 and row.n_buckets == 1 and row.bucket_cap_mb == 2.0
    assert row.step_ms == pytest.approx(12)
    assert row.comm_ms == pytest.approx(4)
    assert row.exposed_comm_ms == pytest.approx(3)
    assert row.overlap_fraction == pytest.approx(1 / 3)  # fractions 1/4, 2/6, 3/4


def test_cap_row_refuses_records_of_different_caps():
    other = _synthetic([1, 10], [(0, 1), (4, 8)])
    other = RunRecord(**{**other.__dict__, "config": {"bucket_cap_mb": 4.0}})
    with pytest.raises(ValueError, match="different caps"):
        cap_row(_synthetic([1, 10], [(0, 1), (4, 8)]), other)


def test_sweep_rejects_bad_requests_before_spawning():
    with pytest.raises(ValueError, match="bucket cap > 0"):
        sweep_buckets(sweep_config(), caps=[])
    with pytest.raises(ValueError, match="bucket cap > 0"):
        sweep_buckets(sweep_config(), caps=[1, -2])
    with pytest.raises(ValueError, match="steps >= 3"):
        sweep_buckets(sweep_config(steps=2), caps=[1])
    with pytest.raises(ValueError, match="repeats"):
        sweep_buckets(sweep_config(), caps=[1], repeats=0)


# --- DDP's real buckets on live ranks -----------------------------------------------------

@pytest.fixture(scope="module")
def small_cap_run(cluster2) -> RunRecord:
    return run(RunConfig(bucket_cap_mb=0.06, **SMALL), cluster=cluster2)


def test_iteration_0_has_one_bucket_with_every_gradient(small_cap_run):
    record = small_cap_run
    for rank in range(2):
        (only,) = step_buckets(record, 0, rank)
        assert set(only.params) == set(record.param_names)
        assert only.bytes == sum(record.param_bytes)
        assert logged_layout(record, rank).initial_sizes == (sum(record.param_bytes),)


def test_rebuilt_buckets_match_ddp_logging_in_reverse_parameter_order(small_cap_run):
    record, names = small_cap_run, small_cap_run.param_names
    logged = logged_layout(record)
    assert logged.ready_order == list(reversed(range(len(names))))  # reverse parameter order
    assert logged.bucket_cap_bytes == int(0.06 * MIB)
    for step in steady_steps(record):
        for rank in range(2):
            seen = step_buckets(record, step, rank)
            assert [b.params for b in seen] == [tuple(names[i] for i in b) for b in logged.rebuilt_params]
            assert tuple(b.bytes for b in seen) == logged.rebuilt_sizes
    assert len(logged.rebuilt_sizes) > 2  # the cap really split the gradients


def test_model_and_torch_assignment_agree_with_ddp(small_cap_run, cluster2):
    record = small_cap_run
    logged = logged_layout(record)
    rebuilt = [list(b) for b in logged.rebuilt_params]
    assert modelled_layout(record) == rebuilt
    limits = cap_limits(record.config["bucket_cap_mb"])
    from_torch = cluster2.run_task(torch_assignment, list(record.param_bytes), logged.ready_order, limits)
    assert from_torch[0] == rebuilt


def test_greedy_model_matches_torch_on_random_gradients(cluster2):
    rng = random.Random(4)
    for _ in range(12):
        n = rng.randint(1, 30)
        sizes = [4 * rng.choice([1, 7, 256, 4096, 65536, 300000]) for _ in range(n)]
        order = rng.sample(range(n), n)
        limits = [4 * rng.randint(1, 200000) for _ in range(rng.randint(1, 3))]
        expected = [[order[p] for p in b] for b in assign_buckets([sizes[i] for i in order], limits)]
        assert cluster2.run_task(torch_assignment, sizes, order, limits)[0] == expected


def test_default_cap_gives_a_1mib_first_bucket_an_explicit_one_does_not(cluster2):
    cfg = RunConfig(layers=8, width=256, batch_per_rank=8, steps=3)  # 256 KiB per layer
    default = run(cfg.replace(bucket_cap_mb=None), cluster=cluster2)
    explicit = run(cfg.replace(bucket_cap_mb=25.0), cluster=cluster2)
    first = logged_layout(default).rebuilt_sizes
    assert FIRST_BUCKET_BYTES <= first[0] < FIRST_BUCKET_BYTES + max(default.param_bytes)
    assert len(first) == 2 and modelled_layout(default) == [list(b) for b in logged_layout(default).rebuilt_params]
    assert logged_layout(explicit).rebuilt_sizes == (sum(explicit.param_bytes),)  # one bucket


def test_step_timeline_follows_causality(small_cap_run):
    for rank in range(2):
        tl = step_timeline(small_cap_run, rank=rank)
        assert [b.index for b in tl.buckets] == list(range(len(tl.buckets)))
        assert [b.ready_ms for b in tl.buckets] == sorted(b.ready_ms for b in tl.buckets)
        for b in tl.buckets:
            assert b.ready_ms <= b.start_ms < b.end_ms  # the hook launches the all-reduce
        optimizer_start = min(s for s, _ in tl.optimizer)
        assert tl.comm_end_ms <= optimizer_start  # the optimizer waits for the last bucket
        exposed = sum(e - s for s, e in tl.exposed)
        assert 0 <= exposed <= sum(b.comm_ms for b in tl.buckets) + 1e-9


def test_one_bucket_is_ready_only_when_backward_ends(cluster2):
    record = run(RunConfig(bucket_cap_mb=ONE_BUCKET_CAP_MB, **SMALL), cluster=cluster2)
    tl = step_timeline(record)
    (only,) = tl.buckets
    backward_op_starts = [s.start_us for s in record.spans_of(rank=0, kind="backward", step=tl.step)]
    assert only.ready_ms >= (max(backward_op_starts) - tl.t0_us) / 1e3  # inside the last op


# --- the sweep, its record and the CLI ----------------------------------------------------

def test_live_sweep_rows_and_record_round_trip(cluster2, tmp_path):
    result = sweep_buckets(RunConfig(**SMALL), cluster=cluster2, caps=[0.1, ONE_BUCKET_CAP_MB], repeats=1,
                           progress=False)
    small, one = result.rows
    assert small.n_buckets > 1 and one.n_buckets == 1
    for row in result.rows:
        # 2 ranks × the analysed steps: not step 0 (one bucket) nor step 1 (the rebuild's broadcasts)
        assert row.samples == 2 * (SMALL["steps"] - 2)
        assert 0 <= row.exposed_comm_ms <= row.comm_ms <= row.step_ms
    path = save(result, tmp_path / "sweep.json")
    assert load(path) == result and isinstance(load(path), BucketSweep)
    assert "buckets" in format_sweep(result)


def test_cli_sweep_writes_sweep_json(tmp_path, capsys):
    from dpviz.app.cli import main

    out = tmp_path / "sw"
    assert main(["buckets", "--ranks", "2", "--caps", "0.1,4", "--steps", "3", "--repeats", "1",
                 "--layers", "4", "--width", "128", "--batch", "8", "--size-link", "--out", str(out)]) == 0
    result = load(out / "sweep.json", expect=BucketSweep)
    sized = result.config["link"]       # --size-link: a link sized to the measured backward
    assert sized["sized_to_ms"] > 0 and f"sized to a measured {sized['sized_to_ms']:g} ms" in capsys.readouterr().out
    assert [r.bucket_cap_mb for r in result.rows] == [0.1, 4.0]
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "sweep.pdf").read_bytes()[:5] == b"%PDF-" and (out / "sweep.svg").stat().st_size > 0
    assert set(CapRow.__dataclass_fields__) >= {"bucket_cap_mb", "n_buckets", "step_ms", "comm_ms",
                                                  "exposed_comm_ms", "overlap_fraction"}


def test_cli_sweep_rejects_a_zero_cap(capsys):
    from dpviz.app.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["buckets", "--caps", "0,1", "--out", "/tmp/unused"])
    assert exit_.value.code == 2 and "must be > 0" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [(["--size-link", "--link", "10GbE"], "drop --link"),
                                           (["--size-link", "--steps", "2"], "steps >= 3")])
def test_cli_sweep_refuses_bad_sizing_before_ranks_start(argv, message, tmp_path, capsys):
    from dpviz.app.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["buckets", *argv, "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- figures, slider, scene ---------------------------------------------------------------

def test_figures_draw_from_a_live_record(small_cap_run):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.lessons.collectives.bandwidth import AlphaBeta
    from dpviz.lessons.buckets.plots import (
        MODEL_GID, plot_bucket_timeline, plot_contrast, plot_layout,
    )

    model = AlphaBeta("all_reduce", 2, alpha_ms=0.3, beta_ms_per_byte=1e-6)
    ax = plot_bucket_timeline(small_cap_run, model=model)
    n = len(step_buckets(small_cap_run, steady_steps(small_cap_run)[-1]))
    assert f"{n} buckets" in ax.get_title(loc="left")
    outlines = [c for c in ax.collections if c.get_gid() == MODEL_GID]   # one artist for every rank
    steady = [b for b in small_cap_run.buckets if b.step == steady_steps(small_cap_run)[-1]]
    assert len(outlines) == 1 and len(outlines[0].get_paths()) == len(steady)   # each rank's buckets
    assert sorted(round(float(np.ptp(path.vertices[:, 0])), 9) for c in outlines for path in c.get_paths()) == \
        sorted(round(model.time_ms(b.bytes), 9) for b in steady)
    assert "step 0 (iteration 0): 1 bucket" in [t.get_text() for t in plot_layout(small_cap_run).get_yticklabels()]
    plot_contrast(small_cap_run, small_cap_run)
    for p in predictions(small_cap_run, model):  # waiting for the other rank is part of measured
        assert 0 <= p.joined_ms <= p.measured_ms and p.predicted_ms == model.time_ms(p.bytes)
    with pytest.raises(ValueError, match="not in this record"):
        plot_bucket_timeline(small_cap_run, step=99)
    plt.close("all")


def test_slider_reruns_live_on_release(cluster2):
    import matplotlib

    matplotlib.use("Agg")
    from dpviz import bucket_cap_slider

    panel = bucket_cap_slider(cluster2, RunConfig(steps=2, **{k: v for k, v in SMALL.items() if k != "steps"}),
                              caps=(0.1, 4.0), value=0.1)
    slider, status = panel.children[0].children
    image = panel.children[-1]
    assert "bucket_cap_mb=0.1: re-ran live" in status.value
    before = bytes(image.value)
    slider.value = 4.0
    assert "bucket_cap_mb=4: re-ran live" in status.value   # caps read as MiB, not 4.0
    assert before[:4] == bytes(image.value)[:4] == b"\x89PNG"
    assert bytes(image.value) != before  # the figure was redrawn for the new cap


@pytest.mark.manim
def test_bucket_overlap_scene_builds_from_a_real_record(small_cap_run, tmp_path):
    from dpviz.app.animate import render

    path = save(small_cap_run, tmp_path / "record.json")
    assert render("buckets", path, dry_run=True) is None


# --- verdicts weigh effects against the spread ---------------------------------------------

def _row(cap, step, iqr, exposed=0.0, exposed_iqr=0.0):
    """A CapRow whose step times spread `iqr` ms around `step` (exposed likewise)."""
    return CapRow(bucket_cap_mb=cap, n_buckets=1, step_ms=step, comm_ms=exposed, exposed_comm_ms=exposed,
                  overlap_fraction=0.0, samples=8, step_ms_quartiles=(step - iqr / 2, step + iqr / 2),
                  exposed_ms_quartiles=(exposed - exposed_iqr / 2, exposed + exposed_iqr / 2))


def test_the_sweep_names_a_u_only_when_both_ends_beat_the_spread():
    from dpviz.lessons.buckets.records import sweep_verdict

    sweep = lambda *rows: BucketSweep(config={}, world_size=2, rows=rows)
    # issue 30: one bucket +4.7 ms against a spread of 8.4 ms is no U
    text = sweep_verdict(sweep(_row(0.25, 40.0, 2.0), _row(1, 30.0, 8.4), _row(4096, 34.7, 3.0)))
    assert "only tiny caps slower beyond the spread, so this run shows no U" in text and "a U" not in text
    text = sweep_verdict(sweep(_row(0.25, 40.0, 2.0), _row(1, 30.0, 3.0), _row(4096, 38.0, 3.0)))
    assert text.endswith("both ends slower beyond the spread, a U")
    text = sweep_verdict(sweep(_row(0.25, 31.0, 5.0), _row(1, 30.0, 5.0), _row(4096, 32.0, 5.0)))
    assert "neither end slower beyond the spread, so this run shows no shape" in text


def test_the_overlap_verdict_never_prints_a_negative_share():
    from dpviz.lessons.buckets.records import hidden_verdict

    # raw loopback in issue 30: the buckets exposed 1.1 ms more than one bucket
    text = hidden_verdict(_row(1, 30, 1, exposed=8.1, exposed_iqr=0.5), _row(4096, 30, 1, exposed=7.0, exposed_iqr=0.5))
    assert text.startswith("overlap hid nothing measurable") and "-" not in text.split("(")[0]
    assert "%" not in text
    text = hidden_verdict(_row(1, 30, 1, exposed=6.0, exposed_iqr=2.0), _row(4096, 30, 1, exposed=7.0, exposed_iqr=1.0))
    assert "within the spread" in text and "%" not in text
    text = hidden_verdict(_row(1, 30, 1, exposed=3.0, exposed_iqr=1.0), _row(4096, 30, 1, exposed=7.0, exposed_iqr=1.0))
    assert text.startswith("overlap hid 4.0 of 7.0 ms") and "(57%;" in text


def test_the_sweep_table_names_one_bucket_as_the_plot_does():
    """Issue 30: the progress bar and the table said "4096 MiB" where the plot said "one bucket"."""
    from dpviz.lessons.buckets.records import cap_label

    assert cap_label(ONE_BUCKET_CAP_MB) == "one bucket" and cap_label(1.0) == "1" and cap_label(None) == "default"
    text = format_sweep(BucketSweep(config={}, world_size=2, rows=(_row(1, 30.0, 3.0), _row(ONE_BUCKET_CAP_MB, 38.0, 3.0))))
    assert "one bucket" in text and "4096" not in text


# --- the scenes tell what the record holds: one bucket or many, link or none --------------------

@pytest.fixture(scope="module")
def linked_runs(cluster2) -> dict[str, RunRecord]:
    """The same small workload over a link, as one bucket and as many (issue 30: the scene drew no
    transfer and captioned a one-bucket step as overlapping)."""
    cfg = RunConfig(link="classroom", **SMALL)
    return {"many": run(cfg.replace(bucket_cap_mb=0.06), cluster=cluster2),
            "one": run(cfg.replace(bucket_cap_mb=ONE_BUCKET_CAP_MB), cluster=cluster2),
            "accumulated": run(cfg.replace(bucket_cap_mb=0.06, accum_steps=2), cluster=cluster2)}


def test_the_overlap_story_is_built_from_the_step_it_replays(linked_runs):
    from dpviz.lessons.buckets.records import bucket_story, story_summary

    many, one = (step_timeline(linked_runs[k]) for k in ("many", "one"))
    fire = bucket_story(many)[1].caption
    early = sum(b.ready_ms < many.backward_end_ms for b in many.buckets)
    assert f"{early} of {len(many.buckets)} buckets fire before backward ends" in fire and early >= 2
    assert "one bucket fires only when its last gradient" in bucket_story(one)[1].caption
    # the one bucket fires only when its last gradient is ready, so only backward's tail after
    # that can run beside its all-reduce (a tail of µs, or longer where the core is shared)
    from dpviz.analysis.overlap import intersection

    tail = one.backward_end_ms - one.buckets[0].ready_ms
    beside = intersection([(b.comm_start_ms, b.end_ms) for b in one.buckets], one.backward)
    assert beside <= max(tail, 0.0) + 1e-9
    assert f"{beside:.1f} of" in bucket_story(one)[2].caption   # the caption says what was measured
    for tl in (many, one):
        assert "link transfers" in story_summary(tl)         # drawn and counted, not left out
        assert [b.name for b in bucket_story(tl)] == ["forward", "buckets fire", "overlap", "optimizer waits"]


@pytest.mark.manim
@pytest.mark.parametrize("scene,key", [("buckets", "many"), ("buckets", "one"), ("accumulation", "accumulated"),
                                       ("accumulation", "one")])
def test_the_scenes_build_from_a_one_bucket_and_a_many_bucket_record(linked_runs, tmp_path, scene, key):
    from dpviz.app.animate import render

    path = save(linked_runs[key], tmp_path / "record.json")
    assert render(scene, path, dry_run=True) is None

"""What if (issues 28 and 43): learning a recorded step, the model's arithmetic, its records and
figures, the CLI, and the model against live emulated-link runs (loose bounds: CI is loaded;
benchmarks/predict_vs_live.py measures the real errors over the whole grid)."""
from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import pytest

from dpviz import RunConfig, load, run, save
from dpviz.analysis.overlap import steady_steps
from dpviz.analysis.trace_files import load_trace
from dpviz.app.commands import predict as cli
from dpviz.core.bucket_layout import assign_buckets, cap_limits
from dpviz.core.link import REDUCTIONS, Link, as_reduction, preset
from dpviz.core.record import RecordError, RunRecord
from dpviz.lessons.what_if.learn import (
    AT_ONCE, Linear, Workers, describe_fit, fit_linear, learn, measure, ring_factor, transfer_ms,
)
from dpviz.lessons.what_if.live import CHECK_CONFIG, KEPT_GRID, check_predictions, measure_load, pool_rows, recheck
from dpviz.lessons.what_if.load import LOWEST_RATE, GlooLoad, LoadArms, load_from_rows, work_done
from dpviz.lessons.what_if.plots import plot_predicted, plot_replay, plot_scaling
from dpviz.lessons.what_if.records import (
    NOT_MODELLED, RECORDED, TABLE_COLUMNS, CheckRow, PredictedStep, PredictionCheck, Scaling, _advance, _progress,
    _Rank, _uncontended, contention, errors, format_check, format_scaling, predict, scaling,
)
from dpviz.lessons.what_if.widgets import move_seconds, what_if_panel
from dpviz.plots.legibility import hidden_texts, texts_over_markers
from dpviz.plots.style import tags_of

DATA = Path(__file__).resolve().parent / "data"
A100 = DATA / "a100-nccl-ddp-rank0.json.gz"
A100_FOLDER = DATA / "nccl-a100-ddp"
LINK = Link(2.0, 500.0)
SMALL = CHECK_CONFIG.replace(layers=4, width=256, steps=4)   # 1 MiB of gradients: a quick step


@pytest.fixture(scope="module")
def a100():
    return learn(load_trace(A100))


@pytest.fixture(scope="module")
def mlp_record(cluster2) -> RunRecord:
    return run(SMALL.replace(link=LINK, bucket_cap_mb=None), cluster=cluster2)


# --- arithmetic ----------------------------------------------------------------------------

def test_wire_charges_alpha_once_per_bucket_on_the_emulated_link_and_per_message_on_a_ring():
    link = Link(8.0, 100.0)   # 1 byte = 1 ns at 8 Gb/s
    assert ring_factor(4) == 1.5
    assert transfer_ms(link, 1_000_000, 4, "transfer") == pytest.approx(0.1 + 1.5)
    assert transfer_ms(link, 1_000_000, 4, "ring") == pytest.approx(6 * 0.1 + 1.5)
    assert transfer_ms(link, 1_000_000, 4, "transfer") == pytest.approx(link.transfer_ms(1_000_000, 4))


def test_fit_linear_recovers_a_line_and_stays_non_negative():
    mib = 1 << 20
    fit = fit_linear([(mib, 1.5), (4 * mib, 3.0), (2 * mib, 2.0)])
    assert fit.fixed_ms == pytest.approx(1.0) and fit.ms_per_mib == pytest.approx(0.5)
    same = fit_linear([(mib, 2.0), (mib, 4.0)])      # sizes alike: proportional
    assert same.fixed_ms == 0 and same.ms_per_mib == pytest.approx(3.0)
    assert fit_linear([(mib, 5.0), (4 * mib, 1.0)]).ms_per_mib == 0.0   # never a negative slope


# --- a loaded trace: the A100 NCCL job -----------------------------------------------------

def test_a100_trace_is_learned_as_its_buckets_with_a_fitted_ring(a100):
    assert a100.device == "gpu" and a100.source == "loaded trace" and not a100.per_gradient
    assert [g.bytes for g in a100.gradients] == [8196000, 31502336, 26255360, 26550272, 9724160]
    assert a100.link is not None and a100.wire == "ring" and a100.reduction.ms_per_mib == 0.0
    assert len(a100.samples) == 2     # steps 5 and 6 (step 4 is the first, left out)


def test_a100_replay_reproduces_the_recorded_step(a100):
    """Replay keeps every recorded time; only each kernel's duration is rebuilt from the fitted
    ring times its step's measured/fitted ratio, so the step comes back within a few percent."""
    replay = predict(a100)
    assert replay.config["buckets"] == "as recorded" and len(replay.buckets) == 5
    assert replay.step_ms == pytest.approx(a100.measured.step_ms, rel=0.05)


def test_more_bandwidth_never_slows_the_predicted_step(a100):
    steps = [predict(a100, link=a100.link.with_gbps(a100.link.gbps * f)).step_ms for f in (0.25, 0.5, 1, 2, 4)]
    assert steps == sorted(steps, reverse=True)


def test_a100_fit_says_in_its_line_that_alpha_holds_peer_waits(a100):
    """One rank loaded: nothing tells rank 0's waiting for rank 1 from the wire, so the fit's α
    is no NCCL latency (NCCL's is a few µs): the line that prints it says so, or α is plausible."""
    line = describe_fit(a100.fit)
    assert a100.fit.ranks == 1 and a100.fit.includes_waits and a100.fit.wire == a100.link
    assert f"α {a100.link.latency_us:g} µs" in line.splitlines()[0]
    assert a100.link.latency_us <= 50 or "includes peer waits" in line.splitlines()[0]


def test_halving_bandwidth_adds_to_exposed_communication_what_beta_implies(a100):
    """At half bandwidth every bucket's kernel takes its ring bytes × 8 / gbps longer (the
    fitted β, nothing else: no measured ratio rides on a target link). The wire is one FIFO
    queue, so communication grows by exactly the sum; exposed communication by at most the
    sum and at least the last bucket's (nothing computes after it)."""
    link = a100.link
    full, half = (predict(a100, link=link.with_gbps(link.gbps * f)) for f in (1.0, 0.5))
    added = [b.bytes * ring_factor(2) * 8 / (link.gbps * 1e9) * 1e3 for b in full.buckets]   # ms per bucket
    assert half.comm_ms - full.comm_ms == pytest.approx(sum(added), rel=1e-6)
    assert added[-1] * (1 - 1e-9) <= half.exposed_comm_ms - full.exposed_comm_ms <= sum(added) * (1 + 1e-9)


def _two_rank_a100(a100_record: RunRecord, wire: Link) -> RunRecord:
    """The A100 job with a rank 1 that arrives at each all-reduce late enough that its kernel
    lasts exactly the ring time on `wire` (2α + S/β at N = 2) and ends with rank 0's: rank
    0's kernels are then that ring time plus waiting for rank 1, as NCCL's are."""
    ones = []
    for s in (s for s in a100_record.spans if s.rank == 0):
        if s.kind == "allreduce":
            s = dataclasses.replace(s, start_us=s.end_us - 1e3 * transfer_ms(wire, s.bytes, 2, "ring"))
        ones.append(dataclasses.replace(s, rank=1))
    return dataclasses.replace(a100_record, spans=a100_record.spans + tuple(ones))


def test_a_fit_after_the_last_rank_joined_recovers_the_wire_without_the_waits():
    """Fitted on what each kernel ran after the last rank joined (the straggler matching's
    arrival times), the ring's α and β come back as built (3 significant digits, as the fit
    rounds); fitted on whole kernels, α holds rank 0's waiting."""
    wire = Link(100.0, 10.0)
    learned = learn(_two_rank_a100(load_trace(A100), wire))
    fit = learned.fit
    assert fit.ranks == 2 and not fit.includes_waits and fit.instances == 10   # 5 buckets × steps 5, 6
    assert fit.wire.gbps == pytest.approx(wire.gbps, rel=5e-3)
    assert fit.wire.latency_us == pytest.approx(wire.latency_us, abs=0.1)
    assert fit.kernels.latency_us > 10 * wire.latency_us
    assert "after the last of 2 loaded ranks joined" in describe_fit(fit)


def test_a_cap_re_packs_the_units_with_torchs_assignment(a100):
    p = predict(a100, world_size=64, link="100GbE", bucket_cap_mb=40.0)
    sizes = [g.bytes for g in a100.gradients]
    assert [b.bytes for b in p.buckets] == [sum(sizes[i] for i in b) for b in assign_buckets(sizes, cap_limits(40.0))]


def test_one_rank_has_nothing_to_all_reduce(a100):
    p = predict(a100, world_size=1, link="100GbE")
    assert not p.spans_of(kind="allreduce") and p.comm_ms == 0 and p.exposed_comm_ms == 0


def test_bad_settings_are_refused_with_a_clear_message(a100):
    for kwargs, match in ((dict(world_size=0), "world_size"), (dict(link="carrier pigeon"), "unknown link"),
                          (dict(bucket_cap_mb=-1.0), "bucket_cap_mb"), (dict(accum_steps=0), "accum_steps"),
                          (dict(wire="tree"), "wire"), (dict(cores=2), "CPU record"),
                          (dict(link="10GbE", reduction="abacus"), "unknown reduction"),
                          (dict(compute=0), "compute must be")):
        with pytest.raises(ValueError, match=match):
            predict(a100, **kwargs)


def test_a_record_with_no_step_to_learn_from_is_refused():
    with pytest.raises(ValueError, match="no step to learn from"):
        learn(load_trace(DATA / "cpu-gloo-rank34.json.gz"))


def test_every_item_the_model_leaves_out_says_which_way_it_moves_the_prediction():
    for item in NOT_MODELLED:
        assert any(word in item for word in ("adds", "subtract", "neither")), item
    assert any("can subtract" in item and "tree" in item for item in NOT_MODELLED)


def test_a_reduction_preset_costs_its_memory_traffic_at_the_quoted_bandwidth():
    a100 = as_reduction("A100")
    assert a100.gbytes_per_s == REDUCTIONS["A100"][0] and "datasheet" in a100.source
    # 3(N−1)/N·S bytes: at N = 4 and 1 GB, 2.25 GB at 1555 GB/s
    assert a100.ms(1e9, 4) == pytest.approx(2.25 / 1555 * 1e3)
    assert as_reduction("none").ms(1e9, 4) == 0.0 and "no reduction cost" in as_reduction("none").label()
    with pytest.raises(ValueError, match="unknown reduction"):
        as_reduction("abacus")


def test_prediction_round_trips_and_draws_as_a_model(a100, tmp_path):
    p = predict(a100, world_size=8, link="10GbE")
    assert load(save(p, tmp_path / "p.json"), expect=PredictedStep) == p
    assert p.not_modelled == NOT_MODELLED and p.config["source"] == "model"
    ax = plot_predicted(p)
    assert tags_of(ax) == ["model"]
    assert "8 ranks" in ax.get_title(loc="left")


def test_scaling_table_efficiency_best_cap_and_exposed_limit(a100, tmp_path):
    table = scaling(a100, link="1GbE", world_sizes=(1, 2, 8, 64), caps=(5.0, 25.0))
    assert load(save(table, tmp_path / "s.json"), expect=Scaling) == table
    best = table.best()
    assert list(best) == [1, 2, 8, 64] and table.efficiency()[1] == 1.0
    for n, row in best.items():
        assert row.step_ms == min(r.step_ms for r in table.rows if r.world_size == n)
    beyond = table.exposed_beyond()
    assert beyond is None or best[beyond].exposed_comm_ms > 0.1 * best[beyond].step_ms
    assert "N" in format_scaling(table)
    assert tags_of(plot_scaling(table))[0].startswith("model")


def test_best_cap_labels_sit_off_every_marker(a100):
    ax = plot_scaling([scaling(a100, link=name) for name in ("10GbE", "100GbE", "NVLink-ish")])
    assert texts_over_markers(ax.figure) == [] and hidden_texts(ax.figure) == []


def _check_row(check: str, n: int, cap: float | None, learned_from: str) -> CheckRow:
    return CheckRow(check, n, "1 Gb/s, α 1000 µs", cap, 1, learned_from, 123.4, 130.2, (110.5, 150.25),
                    12.5, 20.25)


def test_the_check_table_says_shared_settings_once_and_fits_a_notebook_column():
    # the notebook's grid: N = 2, 4 on one link at K = 1, DDP's default cap and 0.5 MiB
    sources = {n: f"N={n} 1 Gb/s, α 1000 µs cap default K=1" for n in (2, 4)}
    rows = tuple(row for n in (2, 4) for row in (
        _check_row("repeat", n, None, "its own earlier run"), _check_row("replay", n, None, sources[n]),
        _check_row("what-if", n, 0.5, sources[n])))
    table = format_check(PredictionCheck({}, rows))
    lines = table.splitlines()
    assert max(map(len, lines)) <= TABLE_COLUMNS, table
    assert lines[0] == "every row: link=1 Gb/s, α 1000 µs, K=1"
    assert table.count("1 Gb/s") == 1 + len(sources)   # the shared line, then each source once
    assert all(f"learned from {s}" in table for s in sources.values())


# --- notebook 16's what-if panel -------------------------------------------------------------

def _status(panel) -> str:
    return panel.children[2].value


def test_a_cap_move_that_keeps_the_buckets_says_it_changes_nothing_and_why(a100):
    total_mib = sum(g.bytes for g in a100.gradients) / 2**20
    caps = (1.0, 2 * total_mib, 4 * total_mib)   # the two large caps each hold every gradient
    layouts = [[b.gradients for b in predict(a100, world_size=8, link="10GbE", bucket_cap_mb=c).buckets]
               for c in caps]
    assert layouts[1] == layouts[2] != layouts[0]   # what the status line must read off
    panel = what_if_panel(a100, world_sizes=(2, 8), links=("10GbE",), caps=caps, value=(8, "10GbE", caps[1], 1))
    cap = panel.children[1].children[0]
    cap.value = caps[2]
    assert f"cap {caps[1]:g} → {caps[2]:g} MiB changes nothing: the buckets are the same" in _status(panel)
    cap.value = caps[0]
    assert "changes nothing" not in _status(panel) and "the buckets are the same" not in _status(panel)


def test_every_control_of_the_panel_moves_on_the_site_and_the_cap_apart(a100, monkeypatch):
    """While a site is built: N × link × K at the start's cap, and cap × link at the start's N
    and K, each a Stack the page moves; a recorded cap's line names the next smaller cap, as
    the page reaches a view from any position, not from the one the recording came from."""
    import ipywidgets as w

    from dpviz.widgets.recorded import ENV, MOVES_PREFIX

    monkeypatch.setenv(ENV, "recorded at build time on a test machine, 2026-01-01")
    total_mib = sum(g.bytes for g in a100.gradients) / 2**20
    caps = (1.0, 2 * total_mib, 4 * total_mib)   # the two large caps each hold every gradient
    panel = what_if_panel(a100, world_sizes=(2, 8), links=("10GbE", "1GbE"), caps=caps, ks=(1, 2),
                          value=(8, "10GbE", caps[1], 1))
    (n, link), (cap, k) = (row.children for row in panel.children if isinstance(row, w.HBox))
    stacks = [c for c in panel.children if isinstance(c, w.Stack)]
    assert len(stacks) == 2 and not any(c.disabled for c in (n, link, cap, k))
    moved = [{c for c in knob._dom_classes if c.startswith(MOVES_PREFIX)} for knob in (n, link, cap, k)]
    assert [len(m) for m in moved] == [1, 2, 1, 1] and moved[2] != moved[0] == moved[3]
    by_cap = [[view.children[1].value for view in inner.children] for inner in stacks[1].children]
    assert [len(views) for views in by_cap] == [2, 2, 2]        # cap × link
    assert all("N=8," in line and "K=1:" in line for views in by_cap for line in views)
    assert all("changes nothing" not in line for line in by_cap[0] + by_cap[1])
    assert all(f"cap {caps[1]:g} → {caps[2]:g} MiB changes nothing" in line for line in by_cap[2])
    assert (n.value, link.value, cap.value, k.value) == (8, "10GbE", caps[1], 1)


def test_timing_slider_moves_leaves_the_panel_at_the_n_it_was_built_with(a100):
    panel = what_if_panel(a100, value=(64, "100GbE", 25.0, 1))
    for moves in (5, 6):
        assert len(move_seconds(panel, moves=moves)) == moves
        assert panel.children[0].children[0].value == 64 and _status(panel).count("N=64,") == 1


# --- the CLI (argparse, as dpviz's CLI calls it) --------------------------------------------

def _cli(*argv: str) -> int:
    """`dpviz predict …` as dpviz's CLI calls it, errors left raised (the CLI prints them)."""
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.main(parser.parse_args(list(argv)))


def test_cli_predicts_from_trace_files_and_writes_its_files(tmp_path, capsys):
    assert _cli(str(A100), "--ranks", "64", "--link", "100GbE", "--bucket-cap-mb", "25", "--out", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "64 ranks" in out and "not modelled" in out and "efficiency" in out
    for name in ("prediction.json", "prediction.png", "scaling.json", "scaling.txt", "scaling.png"):
        assert (tmp_path / name).is_file()
    assert load(tmp_path / "prediction.json").world_size == 64


@pytest.mark.parametrize("argv, message", [
    ([str(A100), "--ranks", "0"], "--ranks must be >= 1"),
    ([str(A100), "--link", "carrier-pigeon"], "unknown link preset"),
    ([str(A100), "--accum-steps", "0"], "accum_steps must be"),
    ([str(DATA / "cpu-gloo-rank34.json.gz")], "no step to learn from"),
    (["/nonexistent/record.json"], "no such"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    from dpviz.app.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["predict", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_takes_a_folder_of_traces_as_load_trace_does(capsys):
    assert _cli(str(A100_FOLDER), "--ranks", "8", "--link", "10GbE", "--reduction", "H100", "--compute", "0.5") == 0
    out = capsys.readouterr().out
    assert "8 ranks" in out and "includes peer waits" in out
    assert "reduction: H100 reduces at 3350 GB/s" in out and "× 0.5 (stated factor)" in out


def test_cli_refuses_a_folder_with_neither_a_record_nor_traces(tmp_path):
    with pytest.raises(ValueError, match="holds no trace files"):
        _cli(str(tmp_path))


# --- live records: replay and what-if against the emulated link ----------------------------

def test_cli_predicts_from_a_run_folder(mlp_record, tmp_path, capsys):
    save(mlp_record, tmp_path / "record.json")
    assert _cli(str(tmp_path), "--ranks", "8", "--link", "10GbE") == 0
    assert "8 ranks" in capsys.readouterr().out


def test_live_record_is_learned_gradient_by_gradient(mlp_record):
    learned = learn(mlp_record)
    assert learned.per_gradient and learned.device == "cpu" and learned.wire == "transfer"
    assert [g.name for g in learned.gradients][:2] == ["8.bias", "8.weight"]     # the last layer first
    assert sum(g.bytes for g in learned.gradients) == sum(mlp_record.param_bytes)
    ready = [g.ready_ms for g in learned.gradients]
    assert ready == sorted(ready)
    assert learned.accum_steps == 1 and any("K = 1" in note for note in learned.notes)


def _ends(workers: int, joins: list[float], cost: float) -> list[float]:
    group, ends = Workers(workers), []
    for joined in joins:
        ends.append(group.start(joined) + cost)
        group.take(ends[-1])
    return ends


def test_gloo_runs_two_all_reduces_at_once_and_nccl_one(mlp_record, monkeypatch):
    """gloo's two workers: three 1 ms all-reduces joined together end at 1, 1 and 2 ms; one
    stream (NCCL) ends them at 1, 2 and 3. On a link fast enough that every bucket queues
    behind the first all-reduce, this machine's replay exposes less communication with two
    workers than it would with one; another cluster (NCCL) is not moved by gloo's count.
    The queueing holds by construction: each all-reduce is made to cost ten backwards (the
    measured one could be shorter than the gaps between buckets on a fast machine)."""
    assert AT_ONCE == {"cpu": 2, "gpu": 1}
    assert _ends(AT_ONCE["cpu"], [0.0, 0.0, 0.0], 1.0) == [1.0, 1.0, 2.0]
    assert _ends(AT_ONCE["gpu"], [0.0, 0.0, 0.0], 1.0) == [1.0, 2.0, 3.0]
    assert _ends(2, [0.0, 5.0], 1.0) == [1.0, 6.0]   # an idle worker: no wait
    learned = learn(mlp_record)
    slow_reduce = Linear(10.0 * max(x.backward_ms for x in learned.samples), 0.0, 1)
    learned = dataclasses.replace(learned, reduction=slow_reduce, samples=tuple(
        dataclasses.replace(x, reduction_ratio=1.0) for x in learned.samples))
    fast = dict(link=Link(100.0, 10.0), bucket_cap_mb=0.25)
    two, cluster_two = predict(learned, **fast, reduction=RECORDED), predict(learned, **fast)
    monkeypatch.setitem(AT_ONCE, "cpu", 1)
    one, cluster_one = predict(learned, **fast, reduction=RECORDED), predict(learned, **fast)
    assert len(two.buckets) > 2 and two.exposed_comm_ms < one.exposed_comm_ms
    assert (cluster_two.step_ms, cluster_two.exposed_comm_ms) == (cluster_one.step_ms, cluster_one.exposed_comm_ms)


def test_a_steps_first_forward_is_learned_apart_and_opens_every_predicted_step(cluster2):
    """The first micro-step's forward follows the previous step's all-reduces; the model learns
    it apart from the synchronising one's and starts each predicted step with it: at K = 1 it
    is the only forward (the synchronising one's length does not count at all), at K = 2 and 3
    both count. Shifts are exact up to float rounding: every rank moves by the same amount.
    At the recorded K (2) each micro-step that all-reduces nothing is replayed as it ran (its
    forward, then the rest of it: given as 5 and 9 ms here, the next forward starts 14 ms
    later), at another K a typical one opens with the first forward."""
    record = run(SMALL.replace(link=LINK, accum_steps=2), cluster=cluster2)
    learned = learn(record)
    for x in learned.samples:
        first = min((sp for sp in record.spans_of(rank=x.rank, step=x.step) if sp.kind == "forward"),
                    key=lambda sp: sp.start_us)
        assert x.first_forward_ms == pytest.approx((first.end_us - first.start_us) / 1e3)
        assert len(x.micro_ms) == 1 and x.micro_ms[0][0] == x.first_forward_ms
    def moved(**change):
        return dataclasses.replace(learned, samples=tuple(
            dataclasses.replace(x, **{f: getattr(x, f) + ms for f, ms in change.items()}) for x in learned.samples))
    for k, field, shift in ((1, "first_forward_ms", 7.0), (1, "forward_ms", 0.0), (2, "forward_ms", 7.0),
                            (3, "first_forward_ms", 7.0), (3, "forward_ms", 14.0)):
        base, later = (predict(x, accum_steps=k) for x in (learned, moved(**{field: 7.0})))
        assert later.step_ms - base.step_ms == pytest.approx(shift, abs=1e-9), (k, field)
    ran = dataclasses.replace(learned, samples=tuple(dataclasses.replace(x, micro_ms=((5.0, 9.0),))
                                                     for x in learned.samples))
    firsts = {x.first_forward_ms for x in learned.samples}
    for k in (2, 3):
        spans = predict(ran, accum_steps=k).spans
        micro = [sp for sp in spans if sp.name == "forward (micro-step 0)"]
        synced = {sp.rank: sp.start_us for sp in spans if sp.name == "forward"}
        lengths = [(sp.end_us - sp.start_us) / 1e3 for sp in micro]
        expected = [[5.0]] * len(lengths) if k == 2 else [firsts] * len(lengths)   # a drawn rank's own first forward
        assert micro and all(any(x == pytest.approx(e, abs=1e-9) for e in ok) for x, ok in zip(lengths, expected))
        if k == 2:
            assert all((synced[sp.rank] - sp.start_us) / 1e3 == pytest.approx(14.0, abs=1e-9) for sp in micro)


def test_contention_slows_backward_beside_gloo_and_learning_takes_it_out_again(mlp_record):
    """Ranks' compute threads and gloo's workers share the cores: while an all-reduce is in
    flight a rank computes at min(1, C/2N) / min(1, C/N) of its speed. Learning takes that
    slowdown out of the recorded backward (`_uncontended`) and the replay puts it back
    (`_advance`): through the same shared intervals, the round trip returns the recorded
    time. A cluster prediction and an unknown core count are not touched by it."""
    learned = learn(mlp_record)
    assert [contention(learned, n, c) for n, c in ((2, 2), (3, 2), (2, 4), (3, 4), (2, None))] == \
        pytest.approx([0.5, 0.5, 1.0, 2 / 3, 1.0])
    assert _advance(0.0, 3.0, [(1.0, 2.0)], 0.5) == 3.5     # 1 ms alone, 0.5 in [1, 2], 1.5 after
    assert _advance(0.0, 3.0, [(1.0, 2.0)], 1.0) == 3.0
    clock = _Rank(learned.samples[0], [], marks=[(0.0, 10.0)])   # backward starts at 10 ms
    assert clock.at(2.0, 1.0, 0.5) == 12.0 and clock.at(-1.0, 1.0, 0.5) == 9.0   # a unit ready before it
    shared = ((1.0, 2.5), (4.0, 5.0))
    sample = dataclasses.replace(learned.samples[0], shared_ms=shared)
    for t in (0.5, 2.0, 3.0, 4.5, 6.0):
        u = _uncontended(sample, t, 0.5)
        assert u <= t and _advance(0.0, u, list(shared), 0.5) == pytest.approx(t, abs=1e-12)
    fast = dict(link=Link(100.0, 10.0), bucket_cap_mb=0.25)
    assert predict(learned, **fast, cores=2) == predict(learned, **fast)   # another cluster
    # one rank-step twice (ranks alike, starting together, no hand-over delay) and all-reduces
    # as long as ten backwards: the first one runs beside the rest of the backward
    alike = dataclasses.replace(learned.samples[0], offset_ms=0.0, handoff_idle_ms=0.0, handoff_busy_ms=0.0,
                                wire_ratio=1.0, reduction_ratio=1.0, shared_ms=())
    slow = dataclasses.replace(learned, reduction=Linear(10.0 * alike.backward_ms, 0.0, 1),
                               samples=(alike, dataclasses.replace(alike, rank=1)))
    machine, alone = (predict(slow, **fast, reduction=RECORDED, cores=c) for c in (2, None))
    assert machine.config["compute_scale"] == alone.config["compute_scale"] == 1.0
    ends = [max(sp.end_us for sp in p.spans_of(rank=0, kind="backward")) for p in (machine, alone)]
    assert ends[0] > ends[1]   # the same compute, slowed where an all-reduce ran beside it


def _load(world_size: int, *arms: LoadArms) -> GlooLoad:
    return GlooLoad(world_size, arms, burst=60, repeats=1, source="made up for the test")


MIB = 1 << 20
# arms of an all-reduce that, beside compute, ran as fast as alone (rates 1 everywhere) and one
# that made no progress until the burst ended (seen done one alone-time after it)
UNHURT = LoadArms(MIB, alone_ms=1.0, pair_first_ms=1.0, compute_ms=10.0, beside_compute_ms=10.0, beside_all_reduce_ms=1.0)
STARVED = LoadArms(MIB, alone_ms=1.0, pair_first_ms=1.0, compute_ms=10.0, beside_compute_ms=10.0, beside_all_reduce_ms=11.0)


def test_load_rates_are_read_off_the_arms():
    """Done before the burst ended (seen at 8 ms, alone 2): it progressed at 2/8 throughout,
    and the burst (10 ms alone, 11 beside) did 10 − 3 ms of its work in the first 8, so 7/8.
    Done after it (seen at 14, burst 12 beside): the last 2 ms ran alone, so 4 ms of work in
    12 beside the burst, and the burst ran at 10/12. Two at once, the first done at 4 against
    2 alone: each at 1/2. Sizes between two measured ones take rates between theirs (on
    log-size), sizes outside the nearest's; no progress is clamped to LOWEST_RATE."""
    before = LoadArms(MIB, 2.0, 4.0, 10.0, 11.0, 8.0).rates()
    assert (before.reduce_beside_compute, before.compute_beside_reduce, before.reduce_paired) == \
        pytest.approx((0.25, 7 / 8, 0.5), abs=1e-12)
    after = LoadArms(MIB, 6.0, 6.0, 10.0, 12.0, 14.0).rates()
    assert (after.reduce_beside_compute, after.compute_beside_reduce, after.reduce_paired) == \
        pytest.approx((4 / 12, 10 / 12, 1.0), abs=1e-12)
    assert STARVED.rates().reduce_beside_compute == LOWEST_RATE
    both = _load(2, dataclasses.replace(STARVED, bytes=4 * MIB), UNHURT)
    assert both.rates(2 * MIB).reduce_beside_compute == pytest.approx((1 + LOWEST_RATE) / 2, abs=1e-12)
    assert both.rates(MIB // 2) == UNHURT.rates() and both.rates(64 * MIB) == STARVED.rates()
    assert "2 ranks" in both.describe() and both.describe().count("MiB") == 2


def _stamps(t: float, lag: float) -> dict[str, float]:
    """One repeat's arms on a rank that left each barrier `lag` ms after its peer (made up)."""
    return {"alone_start": t + lag, "alone_end": t + 3, "pair_start": t + 10 + lag, "pair_first": t + 14,
            "pair_end": t + 16, "compute_start": t + 20 + lag, "compute_end": t + 30,
            "beside_start": t + 40 + lag, "beside_end": t + 51, "beside_seen": t + 48}


def test_a_collective_under_load_is_timed_from_when_its_last_rank_joined():
    """Rank 1 leaves every barrier 2 ms after rank 0. An all-reduce is timed from rank 1's
    start (3 − 2 = 1 ms alone, not rank 0's 3 ms, 2 of them waiting for rank 1), as the model
    learns one; a compute burst is each rank's own, the slowest rank's (rank 0's 10 and 11 ms,
    not the 8 and 9 from rank 1's start). Pooled rows are each rank's repeats end to end, and
    the median is over all of them."""
    rows = [[_stamps(0.0, 0.0)], [_stamps(0.0, 2.0)]]
    arms = load_from_rows(2, {MIB: rows}, burst=60).arms[0]
    assert arms == LoadArms(MIB, alone_ms=1.0, pair_first_ms=2.0, compute_ms=10.0, beside_compute_ms=11.0,
                            beside_all_reduce_ms=6.0)
    own = load_from_rows(2, {MIB: rows}, burst=60, from_last_join=False).arms[0]   # the older reading
    assert (own.alone_ms, own.pair_first_ms, own.beside_all_reduce_ms) == (3.0, 4.0, 8.0)
    first = {MIB: [[_stamps(0.0, 0.0)], [_stamps(0.0, 0.0)]]}
    second = {MIB: [[_stamps(50.0, 0.0)], [_stamps(50.0, 0.0)]]}
    slow = {MIB: [[{**_stamps(100.0, 0.0), "alone_end": 112.0}], [_stamps(100.0, 0.0)]]}
    pooled = pool_rows(pool_rows(first, second), slow)
    assert [len(x) for x in pooled[MIB]] == [3, 3] and pooled[MIB][0][1] == _stamps(50.0, 0.0)
    load_ = load_from_rows(2, pooled, burst=60)
    assert load_.repeats == 3 and load_.arms[0].alone_ms == 3.0   # 3, 3 and 12 ms: the median


def test_progress_runs_at_the_product_of_the_rates_in_force():
    assert _progress(0.0, 4.0, []) == 4.0
    assert _progress(0.0, 4.0, [(10.0, 0.25)]) == 11.5            # 2.5 of work in 10 ms, then 1.5
    assert _progress(0.0, 1.0, [(10.0, 0.25)]) == 4.0             # done while slowed
    assert _progress(0.0, 4.0, [(4.0, 0.5), (8.0, 0.5)]) == 9.0   # 1 in [0, 4], 2 in [4, 8], 1 after
    assert _progress(5.0, 1.0, [(4.0, 0.1)]) == 6.0               # a load that ended before


def test_gloo_under_load_slows_the_all_reduces_beside_backward(mlp_record):
    """Rates of 1 change nothing: the replay with an unhurt gloo is the replay without a load.
    A gloo starved while backward computes (compute unhurt, so backward is the same) ends no
    all-reduce earlier, and every one that joined during backward strictly later; the exposed
    communication cannot shrink. A load is this machine's gloo at one world size: another
    cluster's prediction or another world size refuses it."""
    learned = learn(mlp_record)
    fast = dict(link=Link(100.0, 10.0), bucket_cap_mb=0.25, reduction=RECORDED)
    plain, unhurt = predict(learned, **fast), predict(learned, **fast, load=_load(2, UNHURT))
    assert (unhurt.step_ms, unhurt.exposed_comm_ms, unhurt.spans) == (plain.step_ms, plain.exposed_comm_ms, plain.spans)
    assert "under load" in unhurt.config["costs"] and "under load" not in plain.config["costs"]
    # one rank-step twice (ranks alike, starting together, no hand-over delay): the same step
    # is drawn from both predictions, and its first buckets join while backward computes
    alike = dataclasses.replace(learned.samples[0], offset_ms=0.0, handoff_idle_ms=0.0, handoff_busy_ms=0.0)
    learned = dataclasses.replace(learned, samples=(alike, dataclasses.replace(alike, rank=1)))
    plain, starved = (predict(learned, **fast, load=_load(2, x)) for x in (UNHURT, STARVED))
    backward = [(sp.start_us, sp.end_us) for sp in starved.spans_of(rank=0, kind="backward")]
    assert backward == [(sp.start_us, sp.end_us) for sp in plain.spans_of(rank=0, kind="backward")]
    backward_end = max(end for _, end in backward)
    pairs = list(zip(plain.buckets, starved.buckets))
    assert all(s.reduce_end_ms >= p.reduce_end_ms for p, s in pairs)
    during = [(p, s) for p, s in pairs if s.reduce_start_ms * 1e3 < backward_end]
    assert during and all(s.reduce_end_ms > p.reduce_end_ms for p, s in during)
    assert starved.exposed_comm_ms >= plain.exposed_comm_ms
    with pytest.raises(ValueError, match="only with reduction='recorded'"):
        predict(learned, link=Link(100.0, 10.0), load=_load(2, UNHURT))
    with pytest.raises(ValueError, match="measured at 4 ranks"):
        predict(learned, **fast, load=_load(4, UNHURT))
    with pytest.raises(ValueError, match="must be a GlooLoad"):
        predict(learned, **fast, load={"world_size": 2})


def test_a_step_learned_under_load_counts_its_all_reduces_as_work_alone(mlp_record):
    """Learned with an unhurt gloo, the step is the step learned without a load (work alone
    is the time taken). Learned with a starved one, every all-reduce that ran beside backward
    counted at LOWEST_RATE there: the cost is no larger anywhere, and predicting with the load
    it was learned with is the default. A load of another world size is refused."""
    assert work_done(0.0, 10.0, [(-1.0, 4.0, 0.5), (2.0, 6.0, 0.5)]) == pytest.approx(1 + 0.5 + 1 + 4, abs=1e-12)
    plain, unhurt = learn(mlp_record), learn(mlp_record, load=_load(2, UNHURT))
    assert dataclasses.replace(unhurt, load=None) == plain
    starved = learn(mlp_record, load=_load(2, STARVED))
    assert starved.reduction.ms(MIB) <= plain.reduction.ms(MIB) and starved.load == _load(2, STARVED)
    fast = dict(link=Link(100.0, 10.0), bucket_cap_mb=0.25, reduction=RECORDED)
    assert predict(starved, **fast) == predict(starved, **fast, load=_load(2, STARVED))
    assert predict(starved, **fast, world_size=3).config["costs"].get("under load") is None   # another N: none
    with pytest.raises(ValueError, match="measured at the record's 2 ranks"):
        learn(mlp_record, load=_load(4, UNHURT))


def test_measure_load_times_every_size_on_warm_ranks_and_saves_as_json(cluster2, tmp_path):
    load_ = measure_load(cluster2, sizes=(1 << 16, MIB), burst=20, repeats=3)
    assert load_.world_size == 2 and [a.bytes for a in load_.arms] == [1 << 16, MIB] and load_.repeats == 3
    for arms in load_.arms:
        assert all(ms > 0 for ms in dataclasses.astuple(arms)[1:])
        rates = arms.rates()
        assert all(LOWEST_RATE <= x <= 1 for x in dataclasses.astuple(rates))
    save(load_, tmp_path / "load.json")
    assert load(tmp_path / "load.json", GlooLoad) == load_


def test_runs_of_one_setting_are_pooled_rank_step_by_rank_step(mlp_record):
    """Several runs of one setting are predicted from together: every rank-step of every run
    is replayed and the medians are taken over all (as `measure` pools live runs). A run
    pooled with itself is each rank-step twice, which moves no median: equal to the bit. A
    second run whose optimizer took 10 s longer (far beyond any spread of steps) puts the
    pooled step strictly between the two runs' own. Runs of different settings are refused,
    naming what differs."""
    learned = learn(mlp_record)
    for kwargs in ({}, dict(link=Link(4.0, 250.0), bucket_cap_mb=0.5, accum_steps=2, reduction=RECORDED, cores=2)):
        one, twice = predict(learned, **kwargs), predict([learned, mlp_record], **kwargs)
        assert (twice.step_ms, twice.exposed_comm_ms, twice.comm_ms) == (one.step_ms, one.exposed_comm_ms, one.comm_ms)
        assert twice.config["replayed"] == 2 * one.config["replayed"]
        assert twice.config["learned_from"].endswith("2 runs pooled")
    slower = dataclasses.replace(learned, samples=tuple(
        dataclasses.replace(s, optimizer_ms=s.optimizer_ms + 10_000.0) for s in learned.samples))
    steps = [predict(x).step_ms for x in ([learned], [learned, slower], [slower])]
    assert steps[0] < steps[1] < steps[2]
    with pytest.raises(ValueError, match="differs from run 0 in accum_steps"):
        predict([learned, dataclasses.replace(learned, accum_steps=learned.accum_steps + 1)])
    with pytest.raises(ValueError, match="needs a record"):
        predict([])


def test_a_cluster_prediction_uses_no_cost_learned_from_gloo_unless_asked(mlp_record):
    """Another link is another cluster: the measured all-reduce, hand-overs and wire lateness
    of this machine must not move its prediction (made absurd here, the prediction is the
    same to the bit); asked for (reduction=RECORDED) they do, and the record says whose."""
    learned = learn(mlp_record)
    absurd = dataclasses.replace(learned, reduction=Linear(50.0, 50.0, 1), samples=tuple(
        dataclasses.replace(s, handoff_idle_ms=40.0, handoff_busy_ms=40.0, wire_ratio=3.0) for s in learned.samples))
    for kwargs in (dict(link="100GbE"), dict(link="100GbE", world_size=64, reduction="A100")):
        p, q = predict(learned, **kwargs), predict(absurd, **kwargs)
        assert (p.step_ms, p.exposed_comm_ms) == (q.step_ms, q.exposed_comm_ms)
        assert p.config["reduction"] != RECORDED and "measured" not in p.config["costs"]["reduction"]
    asked = predict(absurd, link="100GbE", reduction=RECORDED)
    assert asked.step_ms > predict(learned, link="100GbE", reduction=RECORDED).step_ms + 40
    assert "measured" in asked.config["costs"]["reduction"]
    assert predict(learned).config["reduction"] == RECORDED   # replaying this machine: its own costs


def test_notebook_16s_scaling_keeps_nvlink_near_perfect_at_two_ranks_and_the_links_apart(cluster2):
    """The notebook's step (6 MiB of gradients on this CPU) on a target cluster: no gloo cost,
    compute as recorded. NVLink-ish moves 6 MiB in ~0.04 ms at N = 2: ≥ 95 % efficiency; at the
    largest N each faster link keeps visibly more (≥ 5 points) than the slower one."""
    record = run(CHECK_CONFIG.replace(link=LINK, bucket_cap_mb=None, steps=5), cluster=cluster2)
    tables = [scaling(record, link=name) for name in ("10GbE", "100GbE", "NVLink-ish")]
    assert tables[2].efficiency()[2] >= 0.95, format_scaling(tables[2])
    last = [t.efficiency()[max(t.efficiency())] for t in tables]
    assert last[0] + 0.05 <= last[1] and last[1] + 0.05 <= last[2], "\n".join(map(format_scaling, tables))


def test_the_replay_sits_under_its_live_step_on_one_time_scale_each_titled(mlp_record):
    live, model = plot_replay(mlp_record, predict(learn(mlp_record)))
    assert live.get_xlim() == model.get_xlim()
    assert live.get_title(loc="left").startswith(f"recorded step {steady_steps(mlp_record)[-1]} (live):")
    assert model.get_title(loc="left").startswith("the model's replay of it:")
    assert [t.split(" ·")[0] for t in (*tags_of(live), *tags_of(model))] == ["live", "model"]


@pytest.mark.serial
@pytest.mark.parametrize("model", ["mlp", "gpt", "cnn"])
def test_replay_of_a_live_record_comes_back_close(model, cluster2):
    """Replay re-assembles each recorded rank-step from its own parts: only the fitted hook,
    wire and all-reduce costs (times each step's own ratio) and the median stand between it and
    the record. Serial: a run recorded beside the other test streams came back 36 % long (22.0
    vs 16.2 ms, CI), since load stretches single all-reduces far past the fit. 35 % on 4 steps
    with the cores to itself (the benchmark's 5 % goal is for the median over a grid:
    benchmarks/README.md, predict_vs_live.py)."""
    cfg = RunConfig(model=model, steps=4, checks=False, link=LINK, bucket_cap_mb=None)
    record = run(cfg, cluster=cluster2)
    replay = predict(record)
    assert replay.step_ms == pytest.approx(measure(record).step_ms, rel=0.35)


def test_what_if_against_live_runs_is_within_the_machines_own_noise(cluster2, tmp_path):
    """Three grid points predicted from the source recorded right before each, three times
    each. The bound is the machine's: the same setting run again differs by some amount (the
    check's "repeat" rows); the model's median error must stay within twice that, or 35 %
    where the machine is quiet (the benchmark's goal is 10 % on a quiet machine). The runs
    kept on the way give the same rows again without a rank (the same records and the same
    model: equal by construction)."""
    check = check_predictions(SMALL, cluster=cluster2, world_sizes=(2,), links=(Link(1.0, 1000.0),),
                              caps=(None, 0.25), accum_steps=(1, 2), repeats=3, keep=tmp_path / "kept")
    what_if, noise = errors(check, "what-if"), errors(check, "repeat")
    assert what_if.rows == 3 and noise.rows == 3
    assert {r.learned_from.split()[-1] for r in check.rows if r.check != "repeat"} == {"K=2"}   # the largest K
    assert what_if.median <= max(0.35, 2 * noise.median), format_check(check)
    assert errors(check, "replay").median <= 0.25, format_check(check)
    assert len(list((tmp_path / "kept").glob("point*.json"))) == 3 * 2 * 3   # points × (source, target) × repeats
    assert load(tmp_path / "kept" / "load-2.json", GlooLoad).world_size == 2   # gloo under load, kept beside
    assert recheck(tmp_path / "kept") == check


def test_keep_and_recheck_refuse_bad_folders_before_any_rank(tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / KEPT_GRID).write_text("{}")
    with pytest.raises(ValueError, match="already holds a kept check"):
        check_predictions(keep=tmp_path / "used")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="cannot make folder"):
        check_predictions(keep=tmp_path / "file" / "below")
    with pytest.raises(RecordError, match="holds no grid.json"):
        recheck(tmp_path)


def test_check_rejects_bad_input_before_any_rank_starts():
    with pytest.raises(ValueError, match="emulated links"):
        check_predictions(links=("off",))
    with pytest.raises(ValueError, match="repeats"):
        check_predictions(repeats=0)


@pytest.mark.parametrize("first", ["import dpviz.lessons.what_if.plots", "import dpviz.lessons.what_if.learn", "pass"])
def test_dpviz_predict_is_callable_whatever_was_imported_first(first):
    """`dpviz.predict` is the facade's verb (the subject's package is `dpviz.lessons.what_if`, so the
    two never share a name): it predicts whatever was imported first."""
    import subprocess
    import sys

    code = (f"{first}\nimport dpviz\nfrom dpviz.lessons.what_if.learn import learn\nfrom dpviz.analysis.trace_files import load_trace\n"
            f"p = dpviz.predict(learn(load_trace({str(A100)!r})), world_size=4, link='10GbE')\n"
            "print(type(p).__name__, p.world_size)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "PredictedStep 4", out.stderr[-2000:]

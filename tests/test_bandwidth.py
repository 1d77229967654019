"""Bandwidth: nccl-tests' busBW maths, the alpha-beta fit, a small live sweep, the CLI."""
from __future__ import annotations

import json

import matplotlib
import pytest

matplotlib.use("Agg")

from dpviz.app.cli import main as cli_main  # noqa: E402
from dpviz.lessons.collectives.bandwidth import BenchRecord, bus_factor, fit_alpha_beta, make_row
from dpviz.lessons.collectives.timing import bench_collectives, op_elements  # noqa: E402
from dpviz.app.commands.bench import size_list  # noqa: E402
from dpviz.lessons.collectives.plots import plot_alpha_beta, plot_busbw  # noqa: E402
from dpviz.core.record import load, save  # noqa: E402


@pytest.mark.parametrize("op,n,factor", [("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("ring", 8, 1.75),
                                         ("reduce_scatter", 4, 0.75), ("all_gather", 2, 0.5),
                                         ("broadcast", 8, 1.0)])
def test_bus_factors_are_nccl_tests(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_unknown_op_has_no_bus_factor():
    with pytest.raises(ValueError, match="no bus factor"):
        bus_factor("all_to_all", 4)


def test_row_uses_the_median_and_the_definitions():
    row = make_row("all_reduce", 8, 10 ** 9, [30.0, 10.0, 10.0, 99.0, 10.0])
    assert row.time_ms == 10.0
    assert row.algbw_gbps == pytest.approx(100.0)     # 1 GB in 10 ms
    assert row.busbw_gbps == pytest.approx(175.0)     # × 2·7/8
    assert make_row("all_gather", 4, 4000, [1.0, 3.0]).time_ms == 2.0


def synthetic(alpha_ms: float, beta: float, sizes=(1 << 10, 1 << 14, 1 << 18, 1 << 22)) -> BenchRecord:
    rows = tuple(make_row("all_reduce", 2, s, [alpha_ms + s * beta]) for s in sizes)
    return BenchRecord(rows=rows, warmup=0, repeats=1)


def test_fit_recovers_alpha_beta_and_the_knee():
    fit = fit_alpha_beta(synthetic(0.3, 1e-6).rows)
    assert fit.alpha_ms == pytest.approx(0.3) and fit.beta_ms_per_byte == pytest.approx(1e-6)
    assert fit.bandwidth_gbps == pytest.approx(1.0)   # 1e-6 ms per byte = 1 GB/s
    assert fit.knee_bytes == pytest.approx(300_000)


def test_fit_never_returns_a_negative_latency():
    rows = [make_row("ring", 2, s, [t]) for s, t in ((1000, 0.0009), (10_000, 0.0101), (100_000, 0.1))]
    fit = fit_alpha_beta(rows)
    assert fit.alpha_ms == 0.0 and fit.beta_ms_per_byte > 0


def test_fit_needs_one_series_and_two_sizes():
    with pytest.raises(ValueError, match="two different sizes"):
        fit_alpha_beta([make_row("all_reduce", 2, 1024, [1.0])])
    with pytest.raises(ValueError, match="one op"):
        fit_alpha_beta([make_row("all_reduce", 2, 1024, [1.0]), make_row("ring", 2, 2048, [1.0])])


def test_figures_draw_the_model_and_the_knee():
    record = synthetic(0.3, 1e-6)
    ax = plot_alpha_beta(record)
    assert any(line.get_linestyle() == ":" and line.get_xdata()[0] == pytest.approx(300_000) for line in ax.lines)
    assert len(plot_busbw(record).lines) == 1 + 4  # the series and four seed references (§2.4, §4.1)


def test_sizes_accept_lists_and_doubling_ranges():
    assert size_list("1KB,...,64MB") == [1024 << k for k in range(17)]
    assert size_list("4096,1MB") == [4096, 1 << 20]


def test_op_elements_split_evenly_over_ranks():
    assert op_elements("all_gather", 1000, 3) == 249 and op_elements("ring", 8, 4) == 4


def test_live_sweep_times_torch_and_dpviz(tmp_path):
    record = bench_collectives([2], [4096, 1 << 16], ["all_reduce", "ring", "all_gather"], warmup=1, repeats=2,
                               progress=False, out=tmp_path)
    assert [(r.op, r.bytes) for r in record.rows] == [(op, s) for s in (4096, 1 << 16)
                                                      for op in ("all_reduce", "ring", "all_gather")]
    for row in record.rows:
        assert len(row.times_ms) == 2 and row.time_ms > 0
        assert row.busbw_gbps == pytest.approx(row.algbw_gbps * bus_factor(row.op, 2))
    assert load(tmp_path / "bench.json") == record


def test_cli_bench_writes_rows(tmp_path, capsys):
    argv = ["bench", "allreduce", "--ranks", "2", "--sizes", "4KB,16KB", "--ops", "all_reduce",
            "--warmup", "0", "--repeats", "2", "--out", str(tmp_path)]
    assert cli_main(argv) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert [r["bytes"] for r in rows] == [4096, 16384]
    assert {"op", "world_size", "bytes", "time_ms", "algbw_gbps", "busbw_gbps"} <= set(rows[0])
    assert "alpha-beta all_reduce, 2 ranks" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["--ranks", "1"], "ranks must be between 2"), (["--ops", "all_to_all"], "unknown op"),
    (["--sizes", "1KB,...,64"], "ends below its start")])
def test_cli_bench_rejects_bad_input(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["bench", "allreduce", *argv, "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_saved_bench_record_round_trips(tmp_path):
    record = synthetic(0.1, 2e-6)
    assert load(save(record, tmp_path / "bench.json")) == record


def test_ring_profile_splits_the_call_into_transfers_and_adds(cluster2):
    from dpviz.lessons.collectives.timing import ring_phases_rank

    for rows in cluster2.run_task(ring_phases_rank, 1 << 16, 1, 3):
        assert len(rows) == 3
        for row in rows:
            assert row["transfer"] > 0 and row["reduce"] > 0 and row["all_reduce"] > 0
            assert row["transfer"] + row["reduce"] <= row["ring"]   # both inside the timed call


def test_all_reduce_under_load_stamps_every_arm_of_every_repeat_on_one_clock(cluster2):
    """Every arm's start and end, on the clock every rank of the host shares: each arm ends
    after it started, and the arms of one repeat (a barrier apart) do not overlap."""
    from dpviz.lessons.collectives.timing import all_reduce_under_load_rank

    for rows in cluster2.run_task(all_reduce_under_load_rank, 1 << 14, 5, 3):
        assert len(rows) == 3
        for row in rows:
            assert set(row) == {"alone_start", "alone_end", "pair_start", "pair_first", "pair_end", "compute_start",
                                "compute_end", "beside_start", "beside_end", "beside_seen"}
            assert row["pair_start"] < row["pair_first"] <= row["pair_end"]   # the first of two is waited for first
            for arm in ("alone", "compute"):
                assert row[f"{arm}_start"] < row[f"{arm}_end"]
            assert row["beside_start"] < min(row["beside_end"], row["beside_seen"])
            spans = sorted((row[f"{arm}_start"], max(v for k, v in row.items() if k.startswith(arm)))
                           for arm in ("alone", "pair", "compute", "beside"))
            assert all(end < start for (_, end), (start, _) in zip(spans, spans[1:]))


def test_link_bench_refuses_other_ops_before_spawn():
    with pytest.raises(ValueError, match="carries all_reduce only"):
        bench_collectives([2], [4096], ["all_reduce", "ring"], link="classroom", progress=False)


@pytest.mark.serial
def test_fit_over_the_link_recovers_its_alpha_and_beta(tmp_path):
    """02's lesson: over the emulated link the alpha-beta fit finds the link's own α and β.
    Each linked call is the link's sleep then the real all-reduce, so the raw loopback fit on
    the same ranks and sizes is subtracted; medians over 3 repeats of the pair, taken in turn.
    Tolerances: β within 25 % (the real all-reduce after a transfer slows under load more than
    the raw bench beside it, so the subtraction leaves some of it); α at least 90 % of the
    link's and, in the best of the 3 repeats, at most 1 ms above it plus that repeat's own noise:
    what is left is the link thread's late wake-up from its sleep and the hand-offs between
    threads, later under load, hence the best repeat rather than the median. The noise is the
    range of the raw medians at 1 to 64 KiB: their bandwidth terms differ by under 0.1 ms on
    loopback (4 MiB takes 4 to 6 ms), so the rest is the machine (up to 3.5 ms within one repeat
    measured on a quiet 2-core VM, where the bound without it failed 2 runs of 5)."""
    from statistics import median

    from dpviz import Cluster
    from dpviz.lessons.collectives.bandwidth import link_alpha_beta, link_fit_errors

    sizes = [1 << k for k in range(10, 23, 2)]
    errors, pairs = [], []
    with Cluster(2) as cluster:
        for _ in range(3):
            linked = bench_collectives(cluster=cluster, sizes=sizes, ops=["all_reduce"], warmup=2,
                                       repeats=5, link="classroom", progress=False)
            raw = bench_collectives(cluster=cluster, sizes=sizes, ops=["all_reduce"], warmup=2,
                                    repeats=5, progress=False)
            errors.append(link_fit_errors(linked, raw))
            pairs.append((linked, raw))
    alpha_ms = link_alpha_beta("classroom", 2).alpha_ms
    d_alpha, d_beta = median(e[0] for e in errors), median(e[1] for e in errors)
    assert abs(d_beta) < 0.25, errors
    noise_ms = [max(small) - min(small) for small in
                ([r.time_ms for r in raw.select("all_reduce", 2) if r.bytes <= 1 << 16] for _, raw in pairs)]
    best = min(e[0] * alpha_ms - noise for e, noise in zip(errors, noise_ms))   # the least disturbed repeat
    assert d_alpha > -0.1 and best < 1.0, (errors, noise_ms)
    save(pairs[0][0], tmp_path / "bench.json")
    assert load(tmp_path / "bench.json") == pairs[0][0] and pairs[0][0].link["name"] == "classroom"
    assert pairs[0][1].link is None
    ax = plot_alpha_beta(pairs[0][0])
    assert "emulated link classroom" in ax.get_title(loc="left")


def test_cli_bench_refuses_a_link_for_other_ops_with_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli_main(["bench", "allreduce", "--ranks", "2", "--sizes", "4KB", "--ops", "ring",
                  "--link", "classroom", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "carries all_reduce only" in err[0]
    assert not (tmp_path / "out").exists()


def test_the_shape_is_read_from_the_data_not_assumed():
    """Issue 30: 02 said raw loopback has "the same shape" while its 64 KiB point took 1.88 ms
    against 0.26 ms at 16 KiB. An ideal alpha-beta curve reads as one; that curve does not."""
    from dpviz.lessons.collectives.bandwidth import describe_shape

    sizes = tuple(1 << k for k in range(10, 23, 2))
    assert describe_shape(synthetic(0.3, 1e-5, sizes)).endswith("verdict: the alpha-beta shape (flat, then rising toward slope one)")
    times = (0.21, 0.24, 0.26, 1.88, 0.9, 2.1, 7.9)
    measured = BenchRecord(rows=tuple(make_row("all_reduce", 2, s, [t]) for s, t in zip(sizes, times)),
                           warmup=0, repeats=1)
    text = describe_shape(measured)
    assert "64 KiB 1.88 ms → 256 KiB 0.90 ms" in text
    assert text.splitlines()[-1].startswith("verdict: not the alpha-beta shape on this run") and "not monotonic" in text
    with pytest.raises(ValueError, match="six sizes"):
        describe_shape(synthetic(0.3, 1e-7))


def test_the_busbw_title_says_what_the_printed_verdict_says():
    """Issue 42 item 5: 02's figure was titled "grows with message size, then levels off"
    under a printed "not the alpha-beta shape on this run". The title now follows the verdict."""
    from dpviz.lessons.collectives.bandwidth import describe_shape

    sizes = tuple(1 << k for k in range(10, 23, 2))
    ideal = synthetic(0.3, 1e-5, sizes)
    assert describe_shape(ideal).endswith("verdict: the alpha-beta shape (flat, then rising toward slope one)")
    assert plot_busbw(ideal).get_title(loc="left") == "all_reduce's bus bandwidth grows with message size, then levels off"
    times = (3.77, 0.9, 0.42, 0.5, 0.9, 2.1, 7.9)   # 4 KB slower than 64 KB, as in the audit's run
    loopback = BenchRecord(rows=tuple(make_row("all_reduce", 2, s, [t]) for s, t in zip(sizes, times)),
                           warmup=0, repeats=1)
    verdict = describe_shape(loopback).splitlines()[-1]
    assert verdict.startswith("verdict: not the alpha-beta shape on this run (")
    title = plot_busbw(loopback).get_title(loc="left")
    assert "not the alpha-beta shape on this run" in title and "levels off" not in title
    assert verdict[verdict.index("("):] in title   # the same reasons, word for word

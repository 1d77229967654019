"""The emulated link: its arithmetic and input checks, and the timing physics it must make
appear on live ranks, asserted as orderings of medians over repeats (robust to a loaded
machine: these were written while six jobs shared two cores)."""
from __future__ import annotations

import statistics

import pytest

from dpviz import accumulation, run
from dpviz.buckets import sweep_config
from dpviz.buckets_records import ONE_BUCKET_CAP_MB, link_predictions, step_timeline, cap_row
from dpviz.cli import main as cli_main
from dpviz.config import RunConfig
from dpviz.link import PRESETS, Link, as_link, link_from_options, preset
from dpviz.record import RunRecord, from_dict, to_dict

LINK = "classroom"       # the lessons' default: transfers dwarf the CPU's own reduction work
CAPS = (0.25, 1.0, ONE_BUCKET_CAP_MB)
REPEATS = 3


def test_transfer_time_is_alpha_plus_ring_bytes_over_beta():
    link = Link(gbps=8.0, latency_us=100.0)          # 8 Gb/s = 1 byte per ns
    # 2 ranks: a ring all-reduce puts 2(N-1)/N = 1× the bucket on each link
    assert link.transfer_ms(1_000_000, 2) == pytest.approx(0.1 + 1.0)
    # 4 ranks: 1.5× the bucket
    assert link.transfer_ms(1_000_000, 4) == pytest.approx(0.1 + 1.5)


def test_presets_parse_case_insensitively_and_off_means_loopback():
    assert preset("10gbe") == Link(*PRESETS["10GbE"], "10GbE")
    assert as_link("off") is None and as_link(None) is None
    assert RunConfig(link="PCIe").link.name == "PCIe"
    assert RunConfig(link={"gbps": 2, "latency_us": 5}).link == Link(2, 5)


@pytest.mark.parametrize("value, message", [
    ("bogus", "unknown link preset"), ({"gbps": 0, "latency_us": 1}, "gbps must be"),
    ({"gbps": 1, "latency_us": -3}, "latency_us must be"), ({"gbps": float("nan"), "latency_us": 1}, "gbps"),
    ({"speed": 1}, "needs gbps and latency_us"), (3.5, "link must be None"),
])
def test_bad_links_are_refused_before_anything_runs(value, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(link=value)


def test_link_options_combine_preset_and_overrides():
    assert link_from_options(None, None, None) is None
    assert link_from_options("10GbE", None, None).name == "10GbE"
    assert link_from_options("10GbE", 2.0, None) == Link(2.0, PRESETS["10GbE"][1])
    assert link_from_options(None, 2.0, 7.0) == Link(2.0, 7.0)
    with pytest.raises(ValueError, match="needs --link-gbps"):
        link_from_options(None, None, 5.0)


@pytest.mark.parametrize("argv", [["--link", "bogus"], ["--link-gbps", "0"], ["--link-gbps", "nan"],
                                  ["--link-latency-us", "5"], ["--link", "off", "--link-gbps", "3"]])
def test_cli_rejects_bad_link_input_with_one_line_exit_2(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli_main(["run", *argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("dpviz run: error:")
    assert not (tmp_path / "out").exists()   # refused before anything spawned or was written


def test_config_with_a_link_round_trips_through_json():
    cfg = RunConfig(link="10GbE")
    assert RunConfig.from_dict(to_dict(cfg)) == cfg


# --- live: the physics, over repeats ------------------------------------------------------

@pytest.fixture(scope="module")
def cap_runs(cluster2) -> dict[float, list[RunRecord]]:
    """REPEATS live runs per cap, caps taken round-robin so load bursts hit every cap.

    Overlap can hide at most one backward of the link's time, while each extra bucket pays α.
    With the sweep's 128 samples per rank an idle 2-core machine runs backward in ~12 ms
    against ~110 ms on the link, and 5 extra α (10 ms) cancel what 1 MiB buckets hide: the
    orderings held only when load slowed backward. 512 samples per rank (backward ~4x longer,
    the same gradient bytes on the link) leave the orderings a margin on a fast machine too."""
    cfg = sweep_config(steps=5, link=LINK, batch_per_rank=512)
    run(cfg.replace(steps=2), cluster=cluster2)   # warm-up
    runs: dict[float, list[RunRecord]] = {cap: [] for cap in CAPS}
    for _ in range(REPEATS):
        for cap in CAPS:
            runs[cap].append(run(cfg.replace(bucket_cap_mb=cap), cluster=cluster2))
    return runs


def test_record_holds_link_and_real_allreduce_spans_in_order(cap_runs):
    record = cap_runs[1.0][0]
    assert from_dict(RunRecord, to_dict(record)).config["link"]["name"] == LINK
    tl = step_timeline(record)
    assert len(tl.buckets) == 6
    for b in tl.buckets:   # causality: ready → transfer → real all-reduce (1 ms of slack for
        assert b.ready_ms <= b.link_start_ms + 1.0        # the clock mark's resolution)
        assert b.link_end_ms <= b.start_ms + 1.0 <= b.end_ms + 1.0
    starts = [b.link_start_ms for b in tl.buckets]     # FIFO: one transfer at a time, in order
    ends = [b.link_end_ms for b in tl.buckets]
    assert all(e <= s + 0.5 for e, s in zip(ends, starts[1:]))
    # the data stayed real: parameters equal on both ranks and to one process
    assert max(c.max_diff_across_ranks for c in record.checks) == 0.0


def test_buckets_hide_communication_that_one_bucket_exposes(cap_runs):
    bucketed, one = cap_row(*cap_runs[1.0]), cap_row(*cap_runs[ONE_BUCKET_CAP_MB])
    assert bucketed.exposed_comm_ms < one.exposed_comm_ms, (bucketed, one)
    assert bucketed.overlap_fraction > one.overlap_fraction


def test_cap_sweep_is_u_shaped(cap_runs):
    tiny, middle, one = (cap_row(*cap_runs[c]).step_ms for c in CAPS)
    assert middle < tiny and middle < one, (tiny, middle, one)


def test_alpha_beta_predicts_the_link_spans_within_20_percent(cap_runs):
    errors = [abs(p.link_ms / p.predicted_ms - 1) for cap in CAPS for r in cap_runs[cap]
              for p in link_predictions(r)]
    assert statistics.median(errors) < 0.2, sorted(errors)


def test_time_per_sample_falls_with_k(cluster2):
    cfg = accumulation.DEMO_CONFIG.replace(link=LINK)
    rows = accumulation.sweep_accumulation(cfg, cluster=cluster2, ks=(1, 2, 4), repeats=2).rows
    per_sample = [r.ms_per_sample for r in rows]
    assert per_sample[0] > per_sample[1] > per_sample[2], per_sample
    # the schedule still reads from the trace: silent micro-steps, then one transfer per bucket
    assert rows[-1].all_reduces_per_micro[:-1] == (0, 0, 0) and rows[-1].all_reduces_per_micro[-1] >= 2


def test_bandwidth_slider_reruns_with_the_new_link(cluster2):
    import matplotlib

    matplotlib.use("Agg")
    from dpviz import link_bandwidth_slider

    cfg = RunConfig(steps=2, layers=2, width=64, bucket_cap_mb=0.01, link="classroom")
    panel = link_bandwidth_slider(cluster2, cfg, gbps=(0.5, 4.0))
    slider, status = panel.children[0].children
    assert "link Gb/s=0.5: re-ran live" in status.value
    slider.value = 4.0
    assert "link Gb/s=4: re-ran live" in status.value
    with pytest.raises(ValueError, match="no emulated link"):
        link_bandwidth_slider(cluster2, cfg.replace(link=None))


def test_cli_run_records_link_spans_with_the_preset_numbers(tmp_path, capsys):
    from dpviz.record import load

    assert cli_main(["run", "--steps", "2", "--layers", "2", "--width", "64", "--link", "10GbE",
                     "--link-latency-us", "300", "--out", str(tmp_path)]) == 0
    record = load(tmp_path / "record.json")
    assert record.config["link"] == {"gbps": 10.0, "latency_us": 300.0, "name": ""}
    assert any(s.kind == "link" for s in record.spans)
    assert "dpviz:link#" in (tmp_path / "trace-merged.json").read_text()   # Perfetto shows them too

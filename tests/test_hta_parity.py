"""dpviz's HTA-style figures agree with Holistic Trace Analysis on the traces in tests/data.

HTA's figures below were computed once, in HTA's own virtual environment (never the user's
install), with holistictraceanalysis==0.5.0 (pandas 3.1.1, torch 2.13.0+cpu):
    a = hta.trace_analysis.TraceAnalysis(trace_dir=DIR)   # DIR holds the one trace file
    a.get_comm_comp_overlap(visualize=False)   # column comp_comm_overlap_pctg
    a.get_temporal_breakdown(visualize=False)  # idle/compute/non_compute_time_pctg, kernel_time(us)
HTA prints its percentages rounded to 0.01; dpviz computes them from the trace's events as HTA
does (dpviz.analysis.hta) and must agree within 0.1 points. On the CPU (gloo) traces HTA 0.5.0
has no figure to compare: its overlap is NaN (0/0: no event on a GPU stream) and its temporal
breakdown raises IndexError; dpviz's own figures stand there, named as dpviz's.
tests/test_traces.py holds the same comparison for every trace folder of tests/data.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpviz.analysis.overlap import comm_compute_overlap, temporal_breakdown
from dpviz.analysis.trace_files import load_trace
from dpviz.app.cli import main as cli

DATA = Path(__file__).parent / "data"
A100 = DATA / "a100-nccl-ddp-rank0.json.gz"
HTA_A100 = {"overlap_pct": 14.31, "idle_pct": 77.78, "compute_pct": 17.26,
            "non_compute_pct": 4.97, "window_us": 435586.0}
POINTS = 0.1


@pytest.fixture(scope="module")
def a100():
    return load_trace(A100)


def test_a100_overlap_matches_hta(a100):
    assert 100 * comm_compute_overlap(a100, 0) == pytest.approx(HTA_A100["overlap_pct"], abs=POINTS)


def test_a100_temporal_breakdown_matches_hta(a100):
    (b,) = temporal_breakdown(a100)
    assert b.rank == 0
    assert b.window_ms * 1e3 == pytest.approx(HTA_A100["window_us"], abs=1.0)  # whole µs, as HTA
    for key in ("idle_pct", "compute_pct", "non_compute_pct"):
        assert getattr(b, key) == pytest.approx(HTA_A100[key], abs=POINTS), key
    assert b.idle_pct + b.compute_pct + b.non_compute_pct == pytest.approx(100, abs=0.02)  # 3 roundings


def test_cpu_traces_get_the_breakdown_hta_cannot_give():
    """Over each rank's busy span: shares add to 100 and communication is counted."""
    record = load_trace(sorted((DATA / "dpviz-gloo-2rank").glob("rank-*.json.gz")))
    rows = temporal_breakdown(record)
    assert [b.rank for b in rows] == [0, 1]
    for b in rows:
        assert b.definition == "dpviz" and b.window_ms > 0 and b.non_compute_pct > 0
        assert b.idle_pct + b.compute_pct + b.non_compute_pct == pytest.approx(100, abs=0.02)
        assert 0 <= comm_compute_overlap(record, b.rank) <= 1


def test_cli_writes_summary_json_with_rows_and_breakdown(tmp_path, capsys):
    assert cli(["load-trace", str(A100), "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["breakdown"][0]["idle_pct"] == pytest.approx(HTA_A100["idle_pct"], abs=POINTS)
    assert 100 * data["overlap"][0]["overlap_fraction"] == pytest.approx(HTA_A100["overlap_pct"], abs=POINTS)
    assert data["overlap"][0]["definition"] == data["breakdown"][0]["definition"] == "HTA"
    assert set(data["definitions"]) == {"HTA", "dpviz", "rows"}
    assert [(r["rank"], r["step"]) for r in data["rows"]] == [(0, 4), (0, 5), (0, 6)]
    for r in data["rows"]:
        assert set(r["comm_ms_by_op"]) == {"all_reduce", "broadcast"}
        assert r["comm_ms"] == pytest.approx(sum(r["comm_ms_by_op"].values()), abs=1e-6)  # disjoint here
        assert r["compute_ms"] + r["comm_ms"] - r["comm_ms"] * r["overlap_fraction"] + r["idle_ms"] \
            <= r["step_ms"] + 1e-6   # memory copies fill the rest


def test_the_headline_and_summary_json_name_one_definition_per_overlap(tmp_path, capsys):
    """Two overlaps, two names: dpviz's per-step mean ("overlap fraction … per analysed
    step") and the whole-window figure ("comm/comp overlap"), which the CLI prints with the
    very number summary.json holds, named as HTA's where HTA reads the trace."""
    folder = DATA / "nccl-sampled-ranks"
    assert cli(["load-trace", str(folder), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "summary.json").read_text())
    hta = json.loads((folder / "hta-0.5.0.json").read_text())["overlap_pct"]
    shown = ", ".join(f"rank {o['rank']} {100 * o['overlap_fraction']:.2f} %" for o in data["overlap"])
    assert f"comm/comp overlap {shown} (HTA 0.5.0's definition, over its window; summary.json " \
           "overlap)" in out
    assert [round(100 * o["overlap_fraction"], 2) for o in data["overlap"]] == [hta["0"], hta["1"]]
    assert "overlap fraction     0.16 per analysed step (dpviz's: a step's communication under " \
           "any compute, averaged" in out
    assert data["definitions"]["rows"].startswith("dpviz's, one per step")

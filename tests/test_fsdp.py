"""FSDP in time: one FSDP2 step recorded live per unit and rank (issue 32).

Live runs of the GPT (its embedding, four blocks and its head as units, the root holding the
position embedding and final LayerNorm) on 2 and 4 gloo ranks over the classroom link, and of
the MLP through the command line. The checks read only the record: when each unit's
parameters had bytes (sampled from the storage FSDP allocates and frees), when its
collectives were issued and carried, when it computed.
"""
from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from dpviz import Cluster
from dpviz.app.cli import main as cli_main
from dpviz.core.record import load, save
from dpviz.lessons.fsdp.live import DEMO_CONFIG, fsdp_knobs, record_fsdp
from dpviz.lessons.fsdp.records import (
    DRAIN, FsdpKnobs, FsdpRecord, ROOT, UnitInfo, alive_spans, count, describe, describe_change,
    measured_peak, modelled_unit_bytes, padded_bytes, peak_gap_bound, peak_model, record_peak_model,
)

from conftest import rank_processes

CFG = DEMO_CONFIG   # the GPT at its default size, 2 steps, classroom link


@pytest.fixture(scope="module")
def runs(cluster2):
    """The four knob settings on 2 ranks (the default one checked against one process)."""
    return {"default": record_fsdp(CFG, cluster=cluster2),
            "no prefetch": record_fsdp(CFG, cluster=cluster2, prefetch=False, checks=False),
            "keep": record_fsdp(CFG, cluster=cluster2, reshard_after_forward=False, checks=False),
            "one unit": record_fsdp(CFG, cluster=cluster2, units="model", checks=False)}


@pytest.fixture(scope="module")
def four():
    with Cluster(4) as cluster:
        return record_fsdp(CFG.replace(world_size=4), cluster=cluster, checks=False)


def window(step, unit: str, phase: str):
    (c,) = [c for c in step.computes if c.unit == unit and c.phase == phase]
    return c


def gather(step, unit: str, phase: str):
    (t,) = [t for t in step.transfers if t.unit == unit and t.op == "all_gather" and t.phase == phase]
    return t


def reduce_scatter(step, unit: str):
    (t,) = [t for t in step.transfers if t.unit == unit and t.op == "reduce_scatter"]
    return t


def every_rank(record: FsdpRecord):
    return [(step, unit, record.unit_index(unit.name)) for step in record.ranks for unit in record.units]


# --- before any rank starts -----------------------------------------------------------------------

@pytest.mark.parametrize("bad, message", [
    (dict(units="layer"), "units must be one of block, model"),
    (dict(prefetch="yes"), "prefetch must be True or False"),
    (dict(reshard_after_forward=None), "reshard_after_forward must be True or False"),
    (dict(cfg=CFG.replace(world_size=1)), "FSDP over 1 rank shards nothing"),
    (dict(cfg=CFG.replace(model="cnn")), "fsdp records the built-in gpt and mlp"),
    (dict(cfg=CFG.replace(steps=1)), "steps must be at least 2"),
])
def test_bad_input_fails_before_any_rank_starts(bad, message):
    before = rank_processes()
    with pytest.raises(ValueError, match=message):
        record_fsdp(**{"cfg": CFG, **bad})
    assert rank_processes() == before


@pytest.mark.parametrize("argv, message", [
    (["--prefetch", "maybe"], "argument --prefetch: invalid choice: 'maybe'"),
    (["--units", "layer"], "argument --units: invalid choice: 'layer'"),
    (["--ranks", "1"], "dpviz fsdp: error: FSDP over 1 rank shards nothing"),
    (["--model", "cnn"], "argument --model: invalid choice: 'cnn'"),
])
def test_cli_bad_input_is_one_error_line_and_exit_2_before_any_rank_starts(argv, message, tmp_path, capsys):
    before = rank_processes()
    with pytest.raises(SystemExit) as exit_:
        cli_main(["fsdp", *argv, "--out", str(tmp_path)])
    assert exit_.value.code == 2 and rank_processes() == before
    error = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(error) == 1 and message in error[0]


# --- the model, by hand -------------------------------------------------------------------------

def test_padding_rounds_dim_0_up_to_the_ranks():
    assert padded_bytes((2048, 64), 2) == 2048 * 64 * 4
    assert padded_bytes((1, 256), 4) == 4 * 256 * 4        # the MLP's head: one row, four ranks
    assert padded_bytes((3,), 2) == 4 * 4
    assert padded_bytes((), 2) == 2 * 4


def test_peak_model_by_hand():
    units = (UnitInfo(ROOT, ("r",), 8, 8), UnitInfo("a", ("a",), 100, 100), UnitInfo("b", ("b",), 30, 30),
             UnitInfo("c", ("c",), 50, 50))
    assert peak_model(units, FsdpKnobs(), 10).peak_bytes == 10 + 8 + 100 + 30
    assert peak_model(units, FsdpKnobs(prefetch=False), 10).peak_bytes == 10 + 8 + 100
    assert peak_model(units, FsdpKnobs(reshard_after_forward=False), 10).peak_bytes == 10 + 188
    assert peak_model(units[:1], FsdpKnobs(units="model"), 10).in_flight == (ROOT,)


# --- live: what each unit's parameters did ----------------------------------------------------------

@pytest.mark.parametrize("name", ["default", "no prefetch", "four ranks"])
def test_each_units_parameters_live_only_between_its_all_gather_and_its_free(runs, four, name):
    """Per unit and rank, in forward and again in backward: the parameters get bytes only after
    their all-gather completed, hold them through the unit's compute, and lose them before the
    unit has left (forward: FSDP's post-forward hook done; backward: before FSDP issues the
    unit's reduce-scatter, which it does right after freeing them). No bytes at any other time."""
    record = four if name == "four ranks" else runs[name]
    for step, unit, i in every_rank(record):
        spans = alive_spans(step, i)
        assert len(spans) == 2, (step.rank, unit.name, spans)
        for (born, freed), phase in zip(spans, ("forward", "backward")):
            c, ag = window(step, unit.name, phase), gather(step, unit.name, phase)
            assert ag.done_ms <= born <= c.start_ms and c.end_ms <= freed, (step.rank, unit.name, phase)
            assert freed <= (c.left_ms if phase == "forward" else reduce_scatter(step, unit.name).issued_ms)
        assert max(s.params[i] for s in step.samples) == unit.gathered_bytes


def test_without_reshard_after_forward_parameters_stay_from_forward_to_backward(runs):
    record = runs["keep"]
    for step, unit, i in every_rank(record):
        (born, freed), = alive_spans(step, i)
        forward, backward = window(step, unit.name, "forward"), window(step, unit.name, "backward")
        assert gather(step, unit.name, "forward").done_ms <= born <= forward.start_ms
        assert backward.end_ms <= freed <= reduce_scatter(step, unit.name).issued_ms
        assert count(step, "all_gather", "backward") == 0


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def test_prefetch_moves_the_next_all_gather_under_the_current_units_compute(runs):
    """On the link: with prefetch, unit k+1's all-gather is issued by unit k before k computes
    (in backward, unit k issues k−1's), and the link carries prefetched all-gathers while units
    compute. Without, every all-gather is issued by its own unit after the one before it
    computed, so none is carried under the compute before it. (When the link thread starts a
    transfer it was handed is the OS's affair on a loaded machine: the overlap is summed over
    the step, not asserted pair by pair.)"""
    order = [u.name for u in runs["default"].units]       # forward order, the root first
    blocks = order[1:]
    backward_pairs = list(zip(blocks[1:][::-1], blocks[:-1][::-1]))   # head → b3 → … → emb
    for name in ("default", "no prefetch"):
        for step in runs[name].ranks:
            carried = 0.0
            pairs = [(a, b, "forward") for a, b in zip(order, order[1:])] + [(a, b, "backward") for a, b in backward_pairs]
            for a, b, phase in pairs:
                ag, c = gather(step, b, phase), window(step, a, phase)
                carried += _overlap((ag.link_start_ms, ag.done_ms), (c.start_ms, c.end_ms))
                if name == "default":
                    assert ag.issued_by == a and ag.issued_ms < c.start_ms, (step.rank, a, b, phase)
                elif a != "root":    # the root computes around every other unit
                    assert ag.issued_by == b and ag.issued_ms >= c.end_ms, (step.rank, a, b, phase)
            if name == "default":
                assert carried > 0, step.rank
            else:
                assert not any(t.prefetched for t in step.transfers if t.op == "all_gather")


@pytest.mark.parametrize("name", ["default", "no prefetch", "keep", "one unit", "four ranks"])
def test_measured_peak_is_the_model_up_to_one_unit(runs, four, name):
    """Model ≤ measured ≤ model + the largest unit. The model's worst moment is sampled (a
    prefetch is issued once its buffer is allocated; a unit computes with its parameters), so
    the measurement reaches it; it can exceed it by one unit, never more: between the end of an
    all-gather and FSDP dropping its output buffer the unit exists twice (buffer and copied-out
    parameters), and a sample from the link thread can land in that copy-out. The shards and
    each unit's gathered bytes are the model's exactly (FSDP pads dim 0 to a multiple of N)."""
    record = four if name == "four ranks" else runs[name]
    modelled = modelled_unit_bytes(record)
    assert {u.name: u.gathered_bytes for u in record.units} == modelled
    for step in record.ranks:
        model = record_peak_model(record, step.rank)
        assert step.shard_bytes == sum(modelled.values()) // record.world_size
        assert model.peak_bytes <= measured_peak(step) <= model.peak_bytes + peak_gap_bound(record)


def test_the_step_trains_what_one_process_trains_and_gloo_reduce_scatters_by_all_reduce(runs):
    record = runs["default"]
    assert record.diff_over_rounding_bound is not None and record.diff_over_rounding_bound <= 1
    assert record.backend_ran == {"all_gather": "gloo:all_gather", "reduce_scatter": "gloo:all_reduce"}
    step = record.ranks[0]
    assert count(step, "all_gather") == 2 * len(record.units) and count(step, "reduce_scatter") == len(record.units)
    assert any(w.unit == DRAIN for w in step.waits)


def test_record_round_trips_and_describes(runs, tmp_path):
    record = runs["default"]
    assert load(save(record, tmp_path / "fsdp.json"), expect=FsdpRecord) == record
    text = describe(record)
    assert "blocks.3" in text and "DDP and ZeRO-1" in text
    assert describe_change(runs["default"], runs["no prefetch"]).startswith("peak ")


# --- drawn ------------------------------------------------------------------------------------------

def test_figures_draw_every_rank_legibly(runs, four):
    from dpviz.lessons.fsdp.plots import plot_fsdp_step, plot_peaks
    from dpviz.plots.legibility import overlapping_texts, small_texts, texts_over_bars
    from dpviz.plots.style import tags_of

    for record in (runs["default"], runs["keep"], four):
        ax = plot_fsdp_step(record)
        assert overlapping_texts(ax.figure) == [] and tags_of(ax) == ["live + model"]
        assert texts_over_bars(ax.figure) == [] and small_texts(ax.figure) == []
        assert [t.get_text() for t in ax.get_yticklabels()].count("rank 3 params") == (record is four)
        plt.close(ax.figure)
    ax = plot_peaks(list(runs.values()))
    assert overlapping_texts(ax.figure) == []
    plt.close(ax.figure)


def test_knob_panel_reruns_live_and_says_what_changed(cluster2):
    matplotlib.use("module://matplotlib_inline.backend_inline")
    try:
        panel = fsdp_knobs(cluster2, CFG)
        prefetch = panel.children[0].children[1]
        prefetch.value = False
        status, change = panel.children[2].value, panel.children[3].value
    finally:
        matplotlib.use("Agg")
    assert "prefetch off" in status and "re-ran live" in status
    assert "a light run: the warm-up step" in status   # a move's warm-up is light, and says so
    assert "→" in change and "all-gathers per step 14 → 14" in change


def test_a_moves_kept_model_trains_what_a_fresh_build_trains(cluster2):
    """A knob's move reuses the sharded model an earlier move at its setting kept on the ranks,
    restored to its state after the warm-up step: the second of two identical light runs reuses
    the first's model and ends with its parameters and Adam state, bit for bit (a seed no
    other test runs, so the first is built afresh)."""
    from rank_tasks import fsdp_kept_against_fresh

    light = CFG.replace(seed=CFG.seed + 7, warmup="light", checks=False)
    for knobs in (FsdpKnobs(), FsdpKnobs(reshard_after_forward=False, prefetch=False)):
        for rank in cluster2.run_task(fsdp_kept_against_fresh, light, knobs):
            assert rank == dict(reused=(False, True), trained=True, equal=True), (knobs, rank)


def test_a_move_after_the_ranks_were_stopped_restarts_them_in_the_status_line_not_stderr(capfd):
    """09b's §5 closes the panel's cluster; the next knob move restarts it. That is said in the
    panel's status line: stderr from a widget's callback is red in JupyterLab's log console."""
    from dpviz import Cluster

    matplotlib.use("module://matplotlib_inline.backend_inline")
    cluster = Cluster(2)
    try:
        panel = fsdp_knobs(cluster, CFG)
        cluster.close()
        capfd.readouterr()
        panel.children[0].children[1].value = False   # prefetch off
        status = panel.children[2].value
        assert capfd.readouterr().err == ""
        assert "prefetch off" in status and "restarted 2 ranks in" in status, status
    finally:
        cluster.close()
        matplotlib.use("Agg")


@pytest.fixture(scope="module")
def mlp_out(tmp_path_factory):
    """`dpviz fsdp --model mlp` on fresh ranks: its output folder."""
    out = tmp_path_factory.mktemp("fsdp-mlp")
    assert cli_main(["fsdp", "--model", "mlp", "--out", str(out)]) == 0
    return out


def test_cli_records_the_mlp_a_unit_per_linear_with_its_figure(mlp_out):
    record = load(mlp_out / "fsdp.json", expect=FsdpRecord)
    assert [u.name for u in record.units] == ["0", "2", "4", "6", "8"]
    head = record.units[-1]          # Linear(256, 1): one row, padded to a row per rank
    assert head.gathered_bytes == padded_bytes((1, 256), 2) + padded_bytes((1,), 2) > head.bytes
    assert all((mlp_out / f"fsdp.{fmt}").stat().st_size > 0 for fmt in ("png", "svg", "pdf"))


@pytest.mark.manim
def test_scene_renders_from_a_recorded_run(mlp_out):
    from dpviz.app.animate import render

    assert render("fsdp", mlp_out / "fsdp.json", dry_run=True) is None


def test_a_wait_splits_into_link_wait_and_peer_wait_by_when_each_ranks_part_arrived():
    """One all-gather: rank 0's part crosses the link 10-20 ms, rank 1's 10-50 ms (it issued
    late). Rank 0 waits 10-55: 10-20 for its own transfer and 50-55 for the collective once
    every part arrived (link wait, 15 ms), 20-50 for rank 1's part (peer wait, 30 ms). Rank 1
    waits 40-55, all link wait: nobody's part arrived after its own."""
    from dpviz.lessons.fsdp.records import RankStep, Transfer, Wait, link_wait_ms, peer_wait_ms, summarize

    def step(rank, link_end, wait_start):
        gather = Transfer("b0", "all_gather", "forward", 1024, 10.0, 10.0, link_end, 55.0, "b0")
        return RankStep(rank, 512, 0.0, 60.0, 55.0, (), (gather,),
                        (Wait("b0", "all_gather", "forward", wait_start, 55.0),), ())

    record = FsdpRecord(config={}, knobs=FsdpKnobs(), world_size=2,
                        units=(UnitInfo("b0", ("w",), 1024, 1024),), ranks=(step(0, 20.0, 10.0), step(1, 50.0, 40.0)),
                        full_bytes=1024, step=0)
    fast, slow = record.ranks
    assert (peer_wait_ms(record, fast), link_wait_ms(record, fast)) == pytest.approx((30.0, 15.0))
    assert (peer_wait_ms(record, slow), link_wait_ms(record, slow)) == pytest.approx((0.0, 15.0))
    assert (summarize(record).peer_wait_ms, summarize(record).link_wait_ms) == pytest.approx((15.0, 15.0))

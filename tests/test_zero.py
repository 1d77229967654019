"""ZeRO: the calculator against the paper, and live sharded runs against the calculator."""
from __future__ import annotations

import pytest

from dpviz.core.config import RunConfig
from dpviz.core.record import load, save
from dpviz.lessons.zero.live import run_sharded, single_process_adam
from dpviz.lessons.zero.records import (
    ADAM_LR, K_FP32, RECIPES, ZeroSweep, count_collectives, describe_zero_sweep, model_for,
    recipe_memory, smallest_stage_that_fits, zero_memory,
)

GB = 1e9


def test_calculator_reproduces_the_zero_paper():
    # ZeRO paper, Figure 1: Ψ = 7.5B, N = 64, K = 12 → 120, 31.4, 16.6, 1.9 GB per device
    totals = [zero_memory(7.5e9, 64, s).total / GB for s in range(4)]
    assert [round(t, 1) for t in totals] == [120.0, 31.4, 16.6, 1.9]


def test_each_stage_shards_one_more_part():
    s = [zero_memory(1e6, 8, stage) for stage in range(4)]
    assert s[1].optimizer == s[0].optimizer / 8 and s[1].grads == s[0].grads
    assert s[2].grads == s[0].grads / 8 and s[2].params == s[0].params
    assert s[3].params == s[0].params / 8
    assert len({zero_memory(1e6, 1, stage).total for stage in range(4)}) == 1   # N=1: nothing to shard


def test_recipes_hold_the_bytes_per_parameter_of_their_training():
    # fp32 Adam: 4 + 4 + (m 4 + v 4) = 16; mixed-precision Adam: 2 + 2 + (master 4 + m 4 + v 4) = 16;
    # mixed-precision SGD + momentum: 2 + 2 + (master 4 + momentum 4) = 12
    assert {name: r.per_param for name, r in RECIPES.items()} == {
        "mixed-precision Adam": 16, "fp32 Adam": 16, "mixed-precision SGD+momentum": 12,
        "fp32 SGD+momentum": 12}
    assert recipe_memory(1e9, 1, 0, "fp32 Adam").total == 16e9
    assert recipe_memory(1e9, 4, 2, "fp32 Adam").params == 4e9       # stage 2 keeps params whole
    assert recipe_memory(1e9, 4, 2, "fp32 Adam").grads == 1e9
    with pytest.raises(ValueError, match="unknown recipe"):
        recipe_memory(1e9, 4, 2, "fp8 Adam")


def test_smallest_stage_that_fits_depends_on_the_recipe():
    # 4 B fp32 Adam on 8 ranks, 32 GB: stage 0 needs 64 GB, stage 1 36 GB, stage 2 22 GB
    assert smallest_stage_that_fits(4e9, 8, 32 * GB, "fp32 Adam") == 2
    # mixed-precision SGD+momentum: stage 0 48 GB, stage 1 16 + 4 = 20 GB
    assert smallest_stage_that_fits(4e9, 8, 32 * GB, "mixed-precision SGD+momentum") == 1


def test_smallest_stage_that_fits():
    assert smallest_stage_that_fits(7.5e9, 64, 80 * GB) == 1
    assert smallest_stage_that_fits(7.5e9, 64, 10 * GB) == 3
    assert smallest_stage_that_fits(7.5e9, 1, 80 * GB) is None


@pytest.mark.parametrize("args", [(1e6, 0, 1), (1e6, 2, 4), (0, 2, 1), (1e6, 2.5, 1)])
def test_calculator_rejects_bad_input(args):
    with pytest.raises(ValueError):
        zero_memory(*args)


@pytest.fixture(scope="module")
def sweep() -> ZeroSweep:
    return run_sharded(RunConfig(steps=3, layers=4, width=128), world_sizes=(1, 2, 4))


def test_sweep_covers_every_rank(sweep):
    assert sweep.world_sizes == [1, 2, 4] and sweep.strategies == ["ddp", "zero1", "fsdp"]
    assert len(sweep.ranks) == 3 * (1 + 2 + 4)


def test_measured_optimizer_state_agrees_with_calculator(sweep):
    for row in sweep.ranks:
        predicted = model_for(row).optimizer            # 8Ψ / N for the sharded stages
        assert abs(row.optimizer_bytes - predicted) <= 0.02 * predicted, row
    for strategy in ("zero1", "fsdp"):
        for n in sweep.world_sizes:                       # no rank holds another's moments
            assert sum(r.optimizer_bytes for r in sweep.rows(strategy, n)) == K_FP32 * sweep.ranks[0].n_params


def test_fsdp_shards_params_and_grads_zero1_does_not(sweep):
    psi = sweep.ranks[0].n_params
    for n in sweep.world_sizes:
        fsdp, zero1 = sweep.rows("fsdp", n), sweep.rows("zero1", n)
        assert sum(r.param_bytes for r in fsdp) == sum(r.grad_bytes for r in fsdp) == 4 * psi
        assert all(r.param_bytes == r.grad_bytes == 4 * psi for r in zero1)
        assert max(r.param_bytes for r in fsdp) <= 1.02 * model_for(fsdp[0]).params


@pytest.mark.numeric
def test_every_strategy_equals_single_process_adam(sweep):
    for row in sweep.ranks:
        if row.rank == 0:   # every parameter within its own rounding bound (adam_entry_bounds)
            assert row.diff_over_rounding_bound <= 1, row


@pytest.mark.numeric
def test_adam_rounding_bound_catches_a_strategy_that_skips_the_all_reduce():
    """The per-parameter bound leaves a wrong strategy nowhere to hide: Adam on rank 0's
    shard alone (what a missing all-reduce computes) is far outside it."""
    from dpviz.lessons.zero.live import compare_with_single_process

    cfg = RunConfig(steps=2, layers=4, width=128, world_size=4)
    shard_only, _ = single_process_adam(cfg.replace(world_size=1))   # rank 0's samples only
    assert compare_with_single_process(cfg, shard_only)[1] > 10


def test_traffic_in_the_trace(sweep):
    for row in sweep.rows(world_size=4):
        if row.strategy == "fsdp":      # params gathered per layer, grads reduce-scattered
            assert row.collectives["gloo:all_gather"] >= 5
            assert row.launches["c10d::_allgather_base_"] == row.collectives["gloo:all_gather"]
            assert row.launches["c10d::_reduce_scatter_base_"] >= 5
            assert "c10d::allreduce_" not in row.launches
        elif row.strategy == "zero1":   # each rank broadcasts the slice it updated
            assert row.collectives["gloo:broadcast"] >= 10
            assert row.collectives["gloo:all_reduce"] >= 1
        else:   # a steady DDP step is one all-reduce (one bucket here); step 1 also broadcast
            assert row.collectives == {"gloo:all_reduce": 1}, row.collectives
            assert row.collectives_by_step[1].get("gloo:broadcast", 0) >= 1   # bucket-order sync
    assert sweep.rows("fsdp", 1)[0].collectives == {}   # one rank: nothing to gather


def test_describe_zero_sweep_is_a_table_of_every_rank(sweep):
    lines = describe_zero_sweep(sweep).splitlines()
    assert len(lines) == 2 + len(sweep.ranks)
    assert lines[2].split()[:3] == ["ddp", "1", "0"]
    assert "{" not in describe_zero_sweep(sweep) and "(" not in "".join(lines[2:])


def test_sweep_round_trips(sweep, tmp_path):
    assert load(save(sweep, tmp_path / "z.json"), ZeroSweep) == sweep


def test_count_collectives_rejects_missing_step():
    with pytest.raises(ValueError, match="dpviz steps"):
        count_collectives({"traceEvents": []}, 0, steps=1)


def test_calculator_widget_redraws_on_slider_moves():
    import matplotlib

    matplotlib.use("Agg")
    from dpviz.lessons.zero.widgets import zero_calculator

    panel = zero_calculator(psi_billions=7.5, world_size=64, stage=0)
    (_, ranks), (stage, _) = panel.children[0].children, panel.children[1].children
    summary = panel.children[2]
    assert "120.00 GB per rank — does NOT fit" in summary.value
    stage.value = 3
    assert f"{zero_memory(7.5e9, 64, 3).total / GB:.2f} GB per rank — fits" in summary.value
    ranks.value = 1
    assert "120.00 GB" in summary.value
    (_, _, k), hint = panel.children[3].children, panel.children[4]
    assert "2 + 2 + 12 = 16 bytes per parameter = mixed-precision Adam" in hint.value
    panel.children[1].children[1].value = "fp32 Adam"           # the recipe menu sets all three
    assert "4 + 4 + 8 = 16 bytes per parameter = fp32 Adam" in hint.value
    assert f"{recipe_memory(7.5e9, 1, 3, 'fp32 Adam').total / GB:.2f} GB per rank" in summary.value
    k.value = 5
    assert "(no named recipe)" in hint.value


def test_calculator_records_every_control_for_the_site(monkeypatch):
    """While a site is built no control stays greyed: Ψ and the bytes sliders become sliders
    over their grids, the recipes' bytes lie on those grids (the menu still sets them), and
    every control is in a recorded group (the recording itself: tests/test_recorded.py)."""
    import ipywidgets as w
    import matplotlib

    matplotlib.use("Agg")
    from dpviz.lessons.zero import widgets
    from dpviz.widgets.recorded import ENV

    monkeypatch.setenv(ENV, "recorded at build time on a test machine, 2026-01-01")
    groups = []
    monkeypatch.setattr(widgets, "recordable", lambda panel, name, controls, views, live_only, note, apart:
                        groups.extend([controls, *(a.controls for a in apart)]) or panel)
    panel = widgets.zero_calculator()
    rows = [c for c in panel.children if isinstance(c, w.HBox)]
    knobs = [k for row in rows for k in row.children]
    assert len(knobs) == 7 and not any(k.disabled for k in knobs)
    assert {id(k) for k in knobs} == {id(k) for g in groups for k in g}   # each in a recorded group
    (psi, _), (_, menu), bytes_sliders = (row.children for row in rows)
    assert isinstance(psi, w.SelectionSlider) and [v for _, v in psi.options] == list(widgets.PSI_GRID)
    for name, recipe in RECIPES.items():
        menu.value = name
        assert [s.value for s in bytes_sliders] == [recipe.param_bytes, recipe.grad_bytes, recipe.k]
        assert all(isinstance(s, w.SelectionSlider) for s in bytes_sliders)


# --- the GPT: whole tensors, an embedding larger than a rank's share ----------------------------

@pytest.fixture(scope="module")
def gpt_sweep() -> ZeroSweep:
    return run_sharded(RunConfig(model="gpt", steps=3), world_sizes=(2, 4), strategies=("zero1", "fsdp"))


def test_gpt_sweep_records_the_real_parameter_list(gpt_sweep, tmp_path):
    info = gpt_sweep.workload
    assert info.name == "gpt" and "blocks.0.attn.qkv.weight" in info.param_names()
    assert sum(p.bytes for p in info.params) == 4 * gpt_sweep.ranks[0].n_params
    assert load(save(gpt_sweep, tmp_path / "z.json"), ZeroSweep) == gpt_sweep


def test_gpt_zero1_holds_its_share_of_adam_in_whole_tensors(gpt_sweep):
    info = gpt_sweep.workload
    psi, largest = gpt_sweep.ranks[0].n_params, max(p.bytes for p in info.params) // 4
    for n in (2, 4):
        rows = gpt_sweep.rows("zero1", n)
        assert sum(r.optimizer_bytes for r in rows) == K_FP32 * psi      # every moment once
        # ZeroRedundancyOptimizer hands out whole tensors, largest first, to the emptiest rank:
        # no rank ends more than one tensor above an even share
        assert all(r.optimizer_bytes <= K_FP32 * (psi / n + largest) for r in rows)
        assert all(r.param_bytes == r.grad_bytes == 4 * psi for r in rows)   # stage 1: replicas
    # at N = 4 the token embedding alone (vocabulary × 64) is more than a quarter of the model, so
    # the rank holding its moments holds more than 1/N: the figure notebook 09 explains
    assert max(r.optimizer_bytes for r in gpt_sweep.rows("zero1", 4)) > K_FP32 * psi / 4


def test_gpt_fsdp_shards_every_part_evenly(gpt_sweep):
    psi = gpt_sweep.ranks[0].n_params
    for n in (2, 4):
        for r in gpt_sweep.rows("fsdp", n):   # FSDP2 shards each tensor by rows: ≤ one row over 1/N
            assert r.param_bytes == r.grad_bytes and r.optimizer_bytes == 2 * r.param_bytes
            assert abs(r.param_bytes - 4 * psi / n) <= 0.02 * 4 * psi / n
    # one all-gather per block forward, again per block backward, + the root's; one
    # reduce-scatter per block + the root's
    blocks = len({p.name.split(".")[1] for p in gpt_sweep.workload.params if p.name.startswith("blocks.")})
    row = gpt_sweep.rows("fsdp", 4)[0]
    assert row.launches["c10d::_reduce_scatter_base_"] == blocks + 1
    assert row.launches["c10d::_allgather_base_"] >= 2 * blocks + 1


@pytest.mark.numeric
def test_gpt_sharded_adam_equals_single_process_adam(gpt_sweep):
    for row in gpt_sweep.ranks:
        if row.rank == 0:   # every parameter within its own rounding bound (adam_entry_bounds)
            assert row.diff_over_rounding_bound <= 1, row


@pytest.mark.numeric
def test_gpt_rounding_bound_catches_adam_on_one_shard():
    from dpviz.lessons.zero.live import compare_with_single_process

    cfg = RunConfig(model="gpt", steps=2, world_size=2)
    shard_only, _ = single_process_adam(cfg.replace(world_size=1))   # rank 0's samples only
    assert compare_with_single_process(cfg, shard_only)[1] > 10

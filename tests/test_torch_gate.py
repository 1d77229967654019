"""Every private torch call dpviz makes is in `dpviz.engine.torch_gate`, and each fallback really
runs: with an internal turned off on the warm ranks, a slider's light run still draws the
steady-state step a full run records (its buckets and spans); the profiler event's TensorList
shapes, which torch 2.11 lacks, are also fed a real event stripped of them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from dpviz.analysis.scan import event_bytes
from dpviz.core.config import RunConfig, for_slider
from dpviz.engine import torch_gate
from dpviz.engine.ddp_run import run
from dpviz.engine.torch_gate import has_list_shapes, input_shapes

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(r"torch\._C|\._reducer|_compute_bucket_assignment_by_size|_rebuild_buckets|"
                     r"_get_zeros_like_grad_buckets|_ddp_logging|_ddp_runtime_logging|kineto_results|"
                     r"structured_input_shapes|_replicate_for_data_parallel|_BatchNorm|\._modules\b|"
                     r"\._parameters\b")


def test_private_torch_calls_live_in_the_gate_only():
    found = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "dpviz").rglob("*.py"))
             if PRIVATE.search(p.read_text())]
    assert found == ["dpviz/engine/torch_gate.py"]


def test_an_unknown_internal_is_refused(cluster2):
    with pytest.raises(Exception, match="not a gated torch internal"):
        cluster2.run_task(torch_gate.disable, ["_no_such_thing"])


@pytest.mark.parametrize("internal", [i for i in torch_gate.INTERNALS if i not in torch_gate.MODULE_INTERNALS])
def test_a_slider_run_without_the_internal_still_draws_a_full_runs_steady_step(cluster2, internal):
    cfg = RunConfig(checks=False, seed=2000 + torch_gate.INTERNALS.index(internal), bucket_cap_mb=0.25)
    cluster2.run_task(torch_gate.disable, [internal])
    try:
        light = [run(for_slider(cfg.replace(steps=2, bucket_cap_mb=cap)), cluster=cluster2)
                 for cap in (0.5, 0.25)]   # the first learns the ready order (where it can)
    finally:
        cluster2.run_task(torch_gate.disable, [])
    full = run(cfg.replace(steps=3), cluster=cluster2)
    notes = lambda r, step: [(b.rank, b.micro_step, b.index, b.bytes, b.params)
                             for b in r.buckets if b.step == step]
    kinds = lambda r, step: sorted((s.rank, s.kind, s.bucket, s.op, s.bytes) for s in r.spans if s.step == step)
    assert len({b.index for b in full.buckets if b.step == 2}) > 1
    assert notes(light[1], 1) == notes(full, 2)
    assert kinds(light[1], 1) == kinds(full, 2)


OPS = ("aten::_foreach_add_", "aten::add_")


class _WithoutListShapes:
    """A profiler event as torch 2.11 gives it: no `structured_input_shapes`."""

    def __init__(self, event):
        self.shapes, self.dtypes = event.shapes, event.dtypes


def _profiled(tmp_path):
    """({op: its profiler event}, {op: its chrome trace args}) of one TensorList op and one
    tensor op, recorded with shapes."""
    tensors = [torch.ones(3, 4), torch.ones(5)]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch._foreach_add_(tensors, 1.0)
        torch.ones(2, 3).add_(1.0)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = {ev.name(): ev for ev in torch_gate.kineto_events(prof) if ev.name() in OPS}
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    args = {ev["name"]: ev["args"] for ev in trace if ev.get("name") in OPS}
    return events, args


@pytest.mark.skipif(not torch_gate.reads_profiler_events(), reason="this torch hides the profiler's events")
def test_input_shapes_are_the_chrome_traces_or_unknown_for_a_tensor_list(tmp_path):
    events, args = _profiled(tmp_path)
    dims = args["aten::_foreach_add_"]["Input Dims"]
    assert dims[0] == [[3, 4], [5]]
    got = input_shapes(events["aten::_foreach_add_"])
    assert got == (dims if has_list_shapes() else [None, *dims[1:]])
    assert input_shapes(events["aten::add_"]) == args["aten::add_"]["Input Dims"]


@pytest.mark.skipif(not torch_gate.reads_profiler_events(), reason="this torch hides the profiler's events")
def test_the_fallback_keeps_tensor_shapes_and_leaves_a_tensor_lists_bytes_unknown(tmp_path):
    events, args = _profiled(tmp_path)
    listed = events["aten::_foreach_add_"]
    flat = input_shapes(_WithoutListShapes(listed))
    assert flat[0] is None      # not [], which would read as a 0-d tensor of 4 bytes
    assert event_bytes({"Input Dims": flat, "Input type": listed.dtypes()}) is None
    plain = input_shapes(_WithoutListShapes(events["aten::add_"]))
    assert plain == args["aten::add_"]["Input Dims"]
    assert event_bytes({"Input Dims": plain, "Input type": events["aten::add_"].dtypes()}) == 2 * 3 * 4


def test_collectives_by_their_older_names_give_what_the_newer_give(cluster2):
    """A torch without `all_gather_single` / `reduce_scatter_single` (2.11) is given the same
    collectives by their older names; small whole numbers, so the sums are exact."""
    from rank_tasks import gather_scatter_by_both_names

    for rank, got in enumerate(cluster2.run_task(gather_scatter_by_both_names)):
        assert got["older"] == got["newer"]
        assert got["newer"][0] == [0.0, 0.0, 1.0, 1.0]                  # each rank's pair, in rank order
        assert got["newer"][1] == [4.0 * rank, 4.0 * rank + 2.0]        # 2 ranks × arange(4), its half



@pytest.fixture
def without(request):
    """Turn off the gate's internals named by the test's parameter in this process, then on."""
    torch_gate.disable(None, request.param)
    yield request.param
    torch_gate.disable(None, [])


@pytest.mark.parametrize("without", [[], ["_replicate_for_data_parallel"]], indirect=True,
                         ids=["private", "fallback"])
def test_a_replica_computes_with_the_given_parameters_and_leaves_the_model_alone(without):
    """Both paths build a replica whose forward and backward use `params`, not the module's own
    parameters; bit-equal to the module run on those values (the same kernels on the same
    tensors, so exact by construction)."""
    import torch

    from dpviz.engine.workloads import build_workload

    torch.manual_seed(0)
    model = build_workload(RunConfig(layers=2, width=8)).model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    leaves = {n: (p.detach() * 2).requires_grad_() for n, p in model.named_parameters()}
    replica = torch_gate.replicate(model, {n: t * 1 for n, t in leaves.items()})
    x = torch.randn(4, 8)
    replica(x).sum().backward()
    reference = torch.func.functional_call(model, {n: t.detach() for n, t in leaves.items()}, (x,))
    assert torch.equal(replica(x), reference)
    assert all(leaves[n].grad is not None for n in leaves)
    assert all(torch.equal(p, before[n]) and p.grad is None for n, p in model.named_parameters())
    assert [n for n, _ in replica.named_parameters()] == []   # computes with params only


@pytest.mark.parametrize("without", [[], ["_BatchNorm"]], indirect=True, ids=["private", "fallback"])
def test_batch_norm_layers_are_found_on_both_paths(without):
    from torch import nn

    from dpviz.engine.workloads import has_batchnorm

    classes = torch_gate.batch_norm_classes()
    assert isinstance(nn.BatchNorm1d(3), classes) and isinstance(nn.SyncBatchNorm(3), classes)
    assert not isinstance(nn.LayerNorm(3), classes)
    assert has_batchnorm(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    assert not has_batchnorm(nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3)))

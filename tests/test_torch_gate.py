"""The gate's fallbacks (dpviz.torch_gate) run here on whatever torch is installed: each one
is fed a real profiler event stripped of the private call it stands in for."""
from __future__ import annotations

import json

import torch
from torch.profiler import ProfilerActivity, profile

from dpviz.torch_gate import has_list_shapes, input_shapes
from dpviz.trace import event_bytes

OPS = ("aten::_foreach_add_", "aten::add_")


class _WithoutListShapes:
    """A profiler event as torch 2.11 gives it: no `structured_input_shapes`."""

    def __init__(self, event):
        self.shapes, self.dtypes = event.shapes, event.dtypes


def _profiled(tmp_path):
    """({op: its kineto event}, {op: its chrome trace args}) of one TensorList op and one
    tensor op, recorded with shapes."""
    tensors = [torch.ones(3, 4), torch.ones(5)]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch._foreach_add_(tensors, 1.0)
        torch.ones(2, 3).add_(1.0)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = {ev.name(): ev for ev in prof.profiler.kineto_results.events() if ev.name() in OPS}
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    args = {ev["name"]: ev["args"] for ev in trace if ev.get("name") in OPS}
    return events, args


def test_input_shapes_are_the_chrome_traces_or_unknown_for_a_tensor_list(tmp_path):
    events, args = _profiled(tmp_path)
    dims = args["aten::_foreach_add_"]["Input Dims"]
    assert dims[0] == [[3, 4], [5]]
    got = input_shapes(events["aten::_foreach_add_"])
    assert got == (dims if has_list_shapes() else [None, *dims[1:]])
    assert input_shapes(events["aten::add_"]) == args["aten::add_"]["Input Dims"]


def test_the_fallback_keeps_tensor_shapes_and_leaves_a_tensor_lists_bytes_unknown(tmp_path):
    events, args = _profiled(tmp_path)
    listed = events["aten::_foreach_add_"]
    flat = input_shapes(_WithoutListShapes(listed))
    assert flat[0] is None      # not [], which would read as a 0-d tensor of 4 bytes
    assert event_bytes({"Input Dims": flat, "Input type": listed.dtypes()}) is None
    plain = input_shapes(_WithoutListShapes(events["aten::add_"]))
    assert plain == args["aten::add_"]["Input Dims"]
    assert event_bytes({"Input Dims": plain, "Input type": events["aten::add_"].dtypes()}) == 2 * 3 * 4

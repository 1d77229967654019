"""Every private torch call dpviz makes is in `dpviz.torch_gate`, and each fallback really
runs: with an internal turned off on the warm ranks, a slider's light run still draws the
steady-state step a full run records (its buckets and spans)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpviz import torch_gate
from dpviz.config import RunConfig, for_slider
from dpviz.ddp_run import run

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(r"torch\._C|\._reducer|_compute_bucket_assignment_by_size|_rebuild_buckets|"
                     r"_get_zeros_like_grad_buckets|_ddp_logging|_ddp_runtime_logging|kineto_results")


def test_private_torch_calls_live_in_the_gate_only():
    found = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "dpviz").rglob("*.py"))
             if PRIVATE.search(p.read_text())]
    assert found == ["dpviz/torch_gate.py"]


def test_an_unknown_internal_is_refused(cluster2):
    with pytest.raises(Exception, match="not a gated torch internal"):
        cluster2.run_task(torch_gate.disable, ["_no_such_thing"])


@pytest.mark.parametrize("internal", torch_gate.INTERNALS)
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

"""Bad input gets a clear error before anything spawns: every live verb, called without a
cluster, rejects a bad argument with a ValueError before `launch` starts a single rank.

The live verbs are found, not listed: every public function of a dpviz module that takes
`cluster=None` (the facade's verbs, the subjects' other verbs, the exercise checkers). The
signal is `launch._Ranks`, the only code that creates rank processes: for this test it
records the attempt and refuses, so a verb that validates late fails here at once instead
of starting ranks.
"""
from __future__ import annotations

import importlib
import inspect

import pytest

import dpviz
from dpviz.core import discover
from dpviz.core.config import RunConfig
from dpviz.engine import launch

NOT_A_MODEL = "json:dumps"   # imports, but returns no dpviz.Workload

# One bad argument per live verb ("module:verb" → keyword arguments): the one most likely to
# be checked only on the ranks (a count, a name, a user's model or function).
BAD = {
    "lessons.accumulation.live:sweep_accumulation": dict(ks=(0,)),
    "lessons.accumulation.live:check_gradients": dict(cfg=RunConfig(model=NOT_A_MODEL)),
    "lessons.accumulation.live:compare_scopes": dict(scopes=("sideways",)),
    "lessons.anatomy.live:measure_anatomy": dict(repeats=0),
    "lessons.averaging.live:worked_example": dict(reduction="max"),
    "lessons.averaging.live:uneven_shards": dict(sizes=(24, 0)),
    "lessons.averaging.live:compare_averaging": dict(steps=0),
    "lessons.averaging.live:compare_hooks": dict(steps=1),
    "lessons.buckets.live:sweep_buckets": dict(cfg=RunConfig(steps=3, model=NOT_A_MODEL)),
    "lessons.buckets.live:overlap_verdict": dict(cap=0.0),
    "lessons.checkpointing.live:measure_checkpointing": dict(checkpoint_every=(99,)),
    "lessons.cpu_sharing.live:measure_cpu_sharing": dict(repeats=0),
    "engine.ddp_run:run": dict(steps=0),
    "lessons.dp_vs_ddp.live:dp_vs_ddp": dict(world_sizes=(1,)),
    "lessons.experts.live:run_expert_layer": dict(tokens=0),
    "lessons.experts.live:expert_parallel": dict(tokens=0),
    "lessons.fsdp.live:record_fsdp": dict(units="layer"),
    "lessons.fsdp.live:prefetch_verdict": dict(cap_s=0),
    "lessons.lifecycle.live:rank_identities": dict(world_size=0),
    "engine.link_sizing:size_link": dict(ratio=0.0),
    "lessons.lifecycle.live:sampler_shards": dict(epochs=0),
    "lessons.lifecycle.live:ddp_lifecycle": dict(steps=0),
    "lessons.pipeline.live:run_pipeline": dict(schedule="zigzag"),
    "lessons.pipeline.live:sweep_pipeline": dict(schedules=("zigzag",)),
    "lessons.what_if.live:check_predictions": dict(repeats=0),
    "lessons.tensor_parallel.live:measure_tensor_parallel": dict(tp_sizes=(1, 2), d_model=0),
    "lessons.zero.live:run_sharded": dict(cfg=RunConfig(model=NOT_A_MODEL)),
    "lessons.collectives.execute:record_collective": dict(algorithm="zigzag"),
    "lessons.collectives.primitives:record_primitives": dict(elements=0),
    "lessons.collectives.timing:bench_collectives": dict(sizes=(0,)),
    "lessons.accumulation.exercise:check_accumulation": dict(fn=42),
    "lessons.buckets.exercise:check_buckets": dict(fn=42),
    "lessons.averaging.exercise:check_hook": dict(fn=42),
    "lessons.collectives.exercise:check_ring": dict(world_size=1),
    "lessons.zero.exercise:check_zero1": dict(fn=42),
}


def live_verbs() -> dict[str, object]:
    """"module:verb" → function, for every public function taking `cluster=None`."""
    found = {}
    for module, text in discover._sources():
        if "using_cluster(" not in text and "Cluster(" not in text:
            continue                  # renderers (widgets take a warm cluster) start no ranks
        mod = importlib.import_module(module)
        for name, fn in vars(mod).items():
            if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != module:
                continue
            param = inspect.signature(fn).parameters.get("cluster")
            if param is not None and param.default is None:
                found[f"{module.partition('.')[2]}:{name}"] = fn
    return found


def test_every_live_verb_has_a_bad_argument_case():
    verbs = live_verbs()
    facade = {f"{mod}:{name}" for name, mod in discover.facade_exports().items()
              if inspect.isfunction(getattr(dpviz, name))
              and getattr(inspect.signature(getattr(dpviz, name)).parameters.get("cluster"),
                          "default", False) is None}
    assert facade <= set(verbs)          # the scan finds every facade verb
    assert set(verbs) == set(BAD), "add a bad-argument case for each new live verb"


@pytest.fixture
def no_ranks(monkeypatch):
    """Starting ranks records the attempt and raises (not a ValueError) instead."""
    started = []

    def refuse(self, world_size, *args):
        started.append(world_size)
        raise AssertionError(f"{world_size} ranks were started before the bad argument was rejected")

    monkeypatch.setattr(launch._Ranks, "__init__", refuse)
    return started


@pytest.mark.parametrize("verb", sorted(BAD))
def test_bad_argument_fails_before_any_rank_starts(verb, no_ranks):
    module, _, name = verb.partition(":")
    fn = getattr(importlib.import_module(f"dpviz.{module}"), name)
    with pytest.raises(ValueError):
        fn(**BAD[verb])
    assert no_ranks == []


# Verbs whose rank code trains the built-in MLP whatever `cfg.model` says: another model would
# be ignored while the record names it, so they refuse it (config.validate_mlp_only).
MLP_ONLY = ("lessons.averaging.live:uneven_shards", "lessons.averaging.live:compare_averaging", "lessons.averaging.live:compare_hooks",
            "lessons.pipeline.live:run_pipeline", "lessons.pipeline.live:sweep_pipeline", "lessons.dp_vs_ddp.live:dp_vs_ddp")


@pytest.mark.parametrize("verb", MLP_ONLY)
def test_a_model_the_verb_would_ignore_is_refused_before_any_rank_starts(verb, no_ranks):
    module, _, name = verb.partition(":")
    fn = getattr(importlib.import_module(f"dpviz.{module}"), name)
    with pytest.raises(ValueError, match="MLP only"):
        fn(RunConfig(model="gpt"))
    assert no_ranks == []

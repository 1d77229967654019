"""dpviz: run data-parallel training on live ranks, record it, draw it.

Data flows one way: run (`Cluster`, `run`, the subject verbs) → record (`load`, `save`) →
render (`dpviz.plots`, `dpviz.widgets`, `animations/`). The layers are folders, imported one
way: `app` → `lessons` → `engine`, `analysis` → `core` (ARCHITECTURE.md).

Each public name below is defined where its subject lives, which declares it in a module-level
`FACADE = (...)`. `import dpviz` imports none of them (it is instant and needs no torch, so a
saved record renders without it): `dpviz.<name>` imports its module on first use. The imports
under TYPE_CHECKING are that list spelled out for readers and editors (go to definition);
tests/test_exports.py keeps it equal to the declarations. `%load_ext dpviz` adds the `%%ranks`
magic (`dpviz.app.magic`), loaded only then.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpviz.analysis.overlap import describe, summarize
    from dpviz.analysis.trace_files import load_trace
    from dpviz.app.export import export_all
    from dpviz.core.config import RunConfig
    from dpviz.core.record import RecordError, RunRecord, load, save
    from dpviz.engine.ddp_run import run
    from dpviz.engine.launch import Cluster, RankError, RankTimeout
    from dpviz.engine.link_sizing import size_link
    from dpviz.engine.workloads import Workload
    from dpviz.lessons.accumulation.live import (
        accumulation_link_slider, check_gradients, compare_scopes, k_slider, sweep_accumulation,
    )
    from dpviz.lessons.anatomy.live import measure_anatomy
    from dpviz.lessons.averaging.live import (
        compare_averaging, compare_hooks, period_slider, uneven_shards, worked_example,
    )
    from dpviz.lessons.buckets.live import bucket_cap_slider, link_bandwidth_slider, sweep_buckets
    from dpviz.lessons.checkpointing.live import measure_checkpointing
    from dpviz.lessons.collectives.bandwidth import fit_alpha_beta
    from dpviz.lessons.collectives.execute import record_collective
    from dpviz.lessons.collectives.primitives import record_primitives
    from dpviz.lessons.collectives.timing import bench_collectives
    from dpviz.lessons.descent.live import compare_descent, gradient_noise
    from dpviz.lessons.experts.live import expert_parallel, run_expert_layer
    from dpviz.lessons.fsdp.live import fsdp_knobs, record_fsdp
    from dpviz.lessons.lifecycle.live import ddp_lifecycle, rank_identities, sampler_shards
    from dpviz.lessons.memory.live import measure_breakdown
    from dpviz.lessons.pipeline.live import run_pipeline, sweep_pipeline
    from dpviz.lessons.precision.live import train_precision
    from dpviz.lessons.tensor_parallel.live import measure_tensor_parallel
    from dpviz.lessons.what_if.live import check_predictions
    from dpviz.lessons.what_if.records import predict
    from dpviz.lessons.zero.live import run_sharded
    from dpviz.lessons.zero.records import zero_memory


def _exports() -> dict[str, str]:
    from dpviz.core.discover import facade_exports

    return facade_exports()


def __getattr__(name: str):
    if name == "__all__":
        return sorted(_exports())
    module = _exports().get(name)
    if module is None:
        raise AttributeError(f"module 'dpviz' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # cache: the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_exports()))


def load_ipython_extension(ipython) -> None:
    """`%load_ext dpviz`: the `%ranks` / `%%ranks` magic (imported now, not with dpviz)."""
    from dpviz.app.magic import RanksMagics

    ipython.register_magics(RanksMagics)


def unload_ipython_extension(ipython) -> None:
    """`%unload_ext dpviz`: stop the magic's ranks."""
    magics = ipython.magics_manager.registry.get("RanksMagics")
    if magics is not None:
        magics.stop()

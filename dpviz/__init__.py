"""dpviz: run data-parallel training on live ranks, record it, draw it.

Data flows one way: run (`Cluster`, `run`, the subject verbs) → record (`load`, `save`) →
render (`dpviz.plots`, `dpviz.widgets`, `animations/`). Names load on first use, so
`import dpviz` is instant and needs no torch (a saved record renders without it).
"""
from __future__ import annotations

import importlib

# public name → module that defines it (the verbs of each subject, in teaching order)
_EXPORTS = {
    # the spine: ranks, runs, records
    "Cluster": "launch", "RankError": "launch", "RankTimeout": "launch",
    "RunConfig": "config", "run": "ddp_run", "Workload": "workloads",
    "RunRecord": "record", "RecordError": "record", "load": "record", "save": "record",
    "describe": "overlap", "summarize": "overlap",
    # collectives and bandwidth
    "record_collective": "collectives.execute", "record_primitives": "collectives.primitives",
    "bench_collectives": "collectives.timing", "fit_alpha_beta": "collectives.bandwidth",
    # buckets, accumulation, checkpointing
    "sweep_buckets": "buckets",
    "sweep_accumulation": "accumulation", "check_gradients": "accumulation",
    "compare_scopes": "accumulation",
    "measure_checkpointing": "checkpointing",
    # the rest of the syllabus
    "measure_anatomy": "anatomy", "gradient_noise": "descent", "compare_descent": "descent",
    "worked_example": "averaging", "uneven_shards": "averaging", "compare_averaging": "averaging",
    "rank_identities": "lifecycle", "sampler_shards": "lifecycle", "ddp_lifecycle": "lifecycle",
    "measure_breakdown": "memory", "zero_memory": "zero_records", "run_sharded": "zero",
    "train_precision": "precision",
    "run_pipeline": "pipeline", "sweep_pipeline": "pipeline",
    "measure_tensor_parallel": "tensor_parallel",
    "run_expert_layer": "experts", "expert_parallel": "experts",
    # live sliders: each re-runs its verb on warm ranks (the panels in dpviz.widgets hold no torch)
    "bucket_cap_slider": "buckets", "link_bandwidth_slider": "buckets", "k_slider": "accumulation",
    "period_slider": "averaging",
    # bring your own trace; every animation
    "load_trace": "trace_files", "export_all": "export",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dpviz' has no attribute {name!r}")
    module, attr = _EXPORTS[name] if isinstance(_EXPORTS[name], tuple) else (_EXPORTS[name], name)
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value  # cache: the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

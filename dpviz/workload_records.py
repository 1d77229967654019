"""What a run trained, as a record (no torch): the workload's name and its parameters.

Figures label real layers with it ("blocks.3.attn.qkv.weight", 48 KiB) instead of indices.
Built on the run side by `dpviz.workloads.describe_workload`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class ParamInfo:
    """One parameter (or buffer): its qualified name, shape and size in bytes."""

    name: str
    shape: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class WorkloadInfo:
    """A workload by name ("mlp", "gpt", "cnn" or "module:function") and its tensors, in
    `model.parameters()` order — the order DDP's logging indexes parameters by."""

    name: str
    params: tuple[ParamInfo, ...]
    buffers: tuple[ParamInfo, ...] = ()

    @property
    def param_bytes(self) -> int:
        return sum(p.bytes for p in self.params)

    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


def describe_params(rows: Iterable[tuple[str, tuple[int, ...], int]]) -> tuple[ParamInfo, ...]:
    return tuple(ParamInfo(name, tuple(shape), int(size)) for name, shape, size in rows)

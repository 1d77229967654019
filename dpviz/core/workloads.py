"""What a run trained, as a record (no torch): the workload's name and its parameters.

Figures label real layers with it ("blocks.3.attn.qkv.weight", 48 KiB) instead of indices.
Built on the run side by `dpviz.engine.workloads.describe_workload`.
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


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def describe_replicated_memory(info: WorkloadInfo, bucket_bytes: int) -> str:
    """What every DDP rank holds for this model, from the run's record: parameters, their
    gradients (same sizes), DDP's flat bucket buffers (`bucket_bytes`, the rebuilt buckets'
    sum: gradients are copied into them unless `gradient_as_bucket_view=True`) and buffers.
    Plain SGD keeps no optimizer state; activations depend on the batch (not recorded here)."""
    params = info.param_bytes
    buffers = sum(b.bytes for b in info.buffers)
    total = 2 * params + bucket_bytes + buffers
    return "\n".join([
        f"{info.name}: what each of the ranks holds (DDP replicates the model):",
        f"  parameters          {_mib(params):>10}  ({len(info.params)} tensors)",
        f"  gradients (.grad)   {_mib(params):>10}  (one per parameter, same size)",
        f"  DDP bucket buffers  {_mib(bucket_bytes):>10}  (flat copies the all-reduce works on)",
        f"  buffers             {_mib(buffers):>10}  ({len(info.buffers)} tensors, e.g. BatchNorm statistics)",
        f"  total               {_mib(total):>10}  + activations, + optimizer state (none for plain SGD)"])

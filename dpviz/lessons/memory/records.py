"""What a memory breakdown records: one replica's bytes per part of a training step.

No torch: renderers and `load()` import this; the measuring (torch, real tensors) is
`dpviz.lessons.memory.live`.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpviz.core.record import record_kind
from dpviz.core.workloads import WorkloadInfo

# buffers: model state that is neither a parameter nor a gradient (BatchNorm's running mean and
# variance and its batch counter); 0 for models without them (the MLP, the GPT)
PARTS = ("params", "buffers", "grads", "optimizer", "activations")
OPTIMIZERS = ("sgd", "momentum", "adam")


@record_kind("memory_breakdown")
@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one replica holds at the peak of a training step (after forward, before backward
    frees the activations; gradients and optimizer state as they are after the step)."""

    config: dict
    optimizer: str
    n_params: int
    params: int
    grads: int
    optimizer_state: int
    activations: int
    state_by_key: dict[str, int]     # e.g. exp_avg → bytes, exp_avg_sq → bytes, step → bytes
    buffers: int = 0                 # registered buffers (BatchNorm running statistics)
    workload: WorkloadInfo | None = None   # the model measured: name and parameter list

    def part(self, name: str) -> int:
        """Bytes of one of PARTS."""
        if name not in PARTS:
            raise ValueError(f"unknown part {name!r}; choose one of {', '.join(PARTS)}")
        return self.optimizer_state if name == "optimizer" else getattr(self, name)

    @property
    def total(self) -> int:
        return sum(self.part(p) for p in PARTS)


ADAM_CHECK_NAMES = {"exp_avg": "exp_avg vs m", "exp_avg_sq": "exp_avg_sq vs v", "params": "parameters"}


def describe_adam_check(diffs: dict[str, float]) -> str:
    """`adam_moments_check`'s largest differences, each beside its float32 bound, and one verdict:
    whether torch's `exp_avg` and `exp_avg_sq` are the paper's m and v on this run."""
    from dpviz.core.rounding import describe_difference

    lines = [f"{ADAM_CHECK_NAMES[k]:16} max |torch − formula|: {describe_difference(diffs[k], diffs[f'bound {k}'])}"
             for k in ADAM_CHECK_NAMES]
    held = all(diffs[k] <= diffs[f"bound {k}"] for k in ADAM_CHECK_NAMES)
    lines.append("verdict: " + ("exp_avg is m and exp_avg_sq is v — every difference is float32 rounding"
                                if held else "a difference exceeds float32 rounding: the state is NOT the "
                                             "paper's formula on this run"))
    return "\n".join(lines)

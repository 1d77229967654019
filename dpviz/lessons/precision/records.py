"""Mixed precision, the data side: float formats as torch describes them, and what the
underflow, loss-scaling and training measurements return. No torch: renderers and `load()`
import this; `dpviz.lessons.precision.live` measures.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpviz.core.record import record_kind

FORMATS = ("float32", "float16", "bfloat16")
MODES = ("fp32", "bf16", "fp16")            # training modes: fp16 runs with a GradScaler
LOG10_BINS = tuple(range(-16, 3))            # histogram edges for log10 |gradient|


@dataclass(frozen=True)
class FloatFormat:
    """One floating-point format as torch.finfo describes it."""

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int           # stored fraction bits (the leading 1 is implicit)
    max: float
    smallest_normal: float
    smallest_subnormal: float    # smallest_normal · eps: below half of it a value becomes 0
    eps: float                   # gap between 1 and the next representable number


@record_kind("format_table")
@dataclass(frozen=True)
class FormatTable:
    """Each format's layout and range, and how it stores one value: read from torch when
    recorded (`dpviz.lessons.precision.live.format_table`), so drawing it needs no torch."""

    value: float
    formats: tuple[FloatFormat, ...]
    bits: tuple[tuple[str, str, str], ...]   # (sign, exponent, mantissa) of `value`, per format


@record_kind("underflow")
@dataclass(frozen=True)
class Underflow:
    """Weight gradients of one backward pass, FP32 vs FP16 autocast, with and without scaling."""

    loss_weight: float
    scale: float
    zero_fraction: dict[str, float]    # fp32 / fp16 / fp16_scaled → share of gradient entries == 0
    rel_error: dict[str, float]        # fp16 / fp16_scaled → ‖g − g_fp32‖ / ‖g_fp32‖
    hist_fp32: tuple[int, ...]         # counts of log10 |g_fp32| in LOG10_BINS
    hist_scaled: tuple[int, ...]       # counts of log10 |scale · g_fp32|
    fp16: FloatFormat                  # the format the gradients were flushed in (torch.finfo)


@record_kind("loss_scaling")
@dataclass(frozen=True)
class ScalingRun:
    """torch.amp.GradScaler on CPU, step by step: the scale and whether the step was skipped."""

    scales: tuple[float, ...]      # scale used for each step's backward
    skipped: tuple[bool, ...]      # inf/nan found in the gradients: optimizer step skipped
    losses: tuple[float, ...]


@record_kind("precision_run")
@dataclass(frozen=True)
class PrecisionRun:
    """The same training run in several precisions: loss curves and the dtypes actually used."""

    config: dict
    lr: float
    losses: dict[str, tuple[float, ...]]        # mode → loss per step
    param_dtype: dict[str, str]                  # mode → dtype of the parameters (master weights)
    activation_dtype: dict[str, str]             # mode → dtype of the model's output


def final_gap(run: PrecisionRun, mode: str, reference: str = "fp32", last: int = 5) -> float:
    """Relative gap of the mean loss over the last steps: |mode − reference| / reference."""
    for m in (mode, reference):
        if m not in run.losses:
            raise ValueError(f"mode {m!r} is not in this run (modes: {sorted(run.losses)})")
    a = sum(run.losses[mode][-last:]) / last
    b = sum(run.losses[reference][-last:]) / last
    return abs(a - b) / b

"""Mixed precision: FP32 / FP16 / BF16 formats, overflow and underflow, loss scaling, autocast.

Every number comes from torch itself: bit layouts and ranges from `torch.finfo`, what a
value becomes from a real cast, gradients from real backward passes of dpviz's MLP workload
under CPU autocast (`torch.autocast("cpu", dtype=float16 | bfloat16)`), dynamic loss scaling
from `torch.amp.GradScaler("cpu")`. Parameters stay FP32 throughout (the master weights):
autocast only runs the matmuls in 16 bits, and the optimizer updates the FP32 copy.

Runs in the calling process (no ranks). torch is imported inside functions; what they return
(formats, underflow, scaling, training records) lives in `dpviz.lessons.precision.records`, no torch.
"""
from __future__ import annotations

import math

from dpviz.core.config import RunConfig, validate_mlp_only
from dpviz.lessons.memory.live import single_threaded
from dpviz.lessons.precision.records import (
    FORMATS, FloatFormat, FormatTable, LOG10_BINS, MODES, PrecisionRun, ScalingRun, Underflow,
)

FACADE = ("train_precision",)  # what `dpviz.<name>` offers from here

# --- formats ------------------------------------------------------------------------------------

def _dtype(name: str):
    import torch

    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; choose one of {', '.join(FORMATS)}")
    return getattr(torch, name)


def float_format(name: str) -> FloatFormat:
    """The layout and range of `name`, derived from torch.finfo (not typed in by hand)."""
    import torch

    info = torch.finfo(_dtype(name))
    mantissa = round(-math.log2(info.eps))
    return FloatFormat(name=name, bits=info.bits, exponent_bits=info.bits - 1 - mantissa,
                       mantissa_bits=mantissa, max=float(info.max),
                       smallest_normal=float(info.smallest_normal),
                       smallest_subnormal=float(info.smallest_normal * info.eps), eps=float(info.eps))


def bit_fields(value: float, name: str) -> tuple[str, str, str]:
    """(sign, exponent, mantissa) bit strings of `value` rounded to format `name`."""
    import torch

    fmt = float_format(name)
    as_int = {32: torch.int32, 16: torch.int16}[fmt.bits]
    raw = int(torch.tensor([value], dtype=torch.float64).to(_dtype(name)).view(as_int)[0])
    bits = format(raw & ((1 << fmt.bits) - 1), f"0{fmt.bits}b")
    return bits[0], bits[1:1 + fmt.exponent_bits], bits[1 + fmt.exponent_bits:]


def format_table(value: float = math.pi, formats: tuple[str, ...] = FORMATS) -> FormatTable:
    """Every format's layout and range, and `value`'s bits in each, read from torch."""
    return FormatTable(value=value, formats=tuple(float_format(n) for n in formats),
                       bits=tuple(bit_fields(value, n) for n in formats))


def cast(values: list[float], name: str) -> list[float]:
    """What each value becomes after a round trip through format `name` (inf on overflow,
    0 on underflow, rounded otherwise)."""
    import torch

    return torch.tensor(values, dtype=torch.float64).to(_dtype(name)).double().tolist()


def cast_table(values: list[float]) -> dict[str, list[float]]:
    """Each format → the values as that format stores them."""
    return {name: cast(values, name) for name in FORMATS}


# --- underflow and loss scaling -----------------------------------------------------------------

def _weight_grads(cfg: RunConfig, loss_weight: float, dtype, scale: float = 1.0):
    """Flat parameter gradients of one backward of the workload (autocast when dtype given)."""
    import torch

    from dpviz.engine.workloads import build_mlp, global_batch, loss_fn

    model = build_mlp(cfg)
    x, y = global_batch(cfg, 0, 0)
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out = model(x)
    (loss_fn(out.float(), y) * loss_weight * scale).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]) / scale


@single_threaded
def gradient_underflow(cfg: RunConfig | None = None, loss_weight: float = 2.0 ** -14,
                       scale: float = 2.0 ** 16) -> Underflow:
    """How many gradient entries FP16 flushes to zero, and how a loss scale rescues them.

    `loss_weight` shrinks the loss (and so every gradient) the way a large model near
    convergence has tiny gradients; the backward through FP16 activations then rounds many
    of them to 0. Multiplying the loss by `scale` before backward and dividing the FP32
    gradients by it afterwards (what GradScaler does) keeps them representable.
    """
    import torch

    cfg = validate_mlp_only(cfg or RunConfig(), "gradient_underflow")
    ref = _weight_grads(cfg, loss_weight, None)
    plain = _weight_grads(cfg, loss_weight, torch.float16)
    scaled = _weight_grads(cfg, loss_weight, torch.float16, scale)

    def rel(g):
        return float((g - ref).norm() / ref.norm())

    return Underflow(
        loss_weight=loss_weight, scale=scale,
        zero_fraction={k: float((g == 0).float().mean()) for k, g in
                       (("fp32", ref), ("fp16", plain), ("fp16_scaled", scaled))},
        rel_error={"fp16": rel(plain), "fp16_scaled": rel(scaled)},
        hist_fp32=log10_histogram(ref), hist_scaled=log10_histogram(ref * scale),
        fp16=float_format("float16"))


def log10_histogram(values) -> tuple[int, ...]:
    """Counts of log10 |v| of the non-zero entries in the LOG10_BINS intervals."""
    import torch

    logs = values[values != 0].abs().double().log10().clamp(LOG10_BINS[0], LOG10_BINS[-1] - 1e-9)
    edges = torch.tensor(LOG10_BINS, dtype=torch.float64)
    return tuple(int(c) for c in torch.histogram(logs, bins=edges).hist.tolist())


@single_threaded
def dynamic_scaling(cfg: RunConfig | None = None, steps: int = 20, init_scale: float = 2.0 ** 30,
                    growth_interval: int = 4) -> ScalingRun:
    """Train with FP16 autocast + GradScaler from a scale far too large.

    Overflowing steps (inf in the gradients) are skipped and halve the scale; after
    `growth_interval` clean steps it doubles again — the scale settles just under overflow.
    """
    import torch

    from dpviz.engine.workloads import build_mlp, global_batch, loss_fn

    cfg = validate_mlp_only(cfg or RunConfig(), "dynamic_scaling")
    model = build_mlp(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    scales, skipped, losses = [], [], []
    for step in range(steps):
        x, y = global_batch(cfg, step, 0)
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        loss = loss_fn(out.float(), y)
        before = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(opt)          # unscales, and skips the step if any gradient is inf/nan
        scaler.update()
        opt.zero_grad(set_to_none=True)
        scales.append(before)
        skipped.append(scaler.get_scale() < before)   # update() halves the scale after a skip
        losses.append(loss.item())
    return ScalingRun(tuple(scales), tuple(skipped), tuple(losses))


# --- mixed-precision training -------------------------------------------------------------------

@single_threaded
def train_precision(cfg: RunConfig | None = None, steps: int = 40, modes: tuple[str, ...] = ("fp32", "bf16"),
                    lr: float = 1e-3) -> PrecisionRun:
    """Adam on the workload (one process, the global batch) once per mode, same seed and data."""
    import torch

    from dpviz.engine.workloads import build_mlp, global_batch, loss_fn

    cfg = validate_mlp_only(cfg or RunConfig(), "train_precision")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    losses, param_dtype, act_dtype = {}, {}, {}
    for mode in modes:
        model = build_mlp(cfg)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[mode]
        scaler = torch.amp.GradScaler("cpu", enabled=mode == "fp16")
        curve = []
        for step in range(steps):
            x, y = global_batch(cfg, step, 0)
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                out = model(x)
            loss = loss_fn(out.float(), y)      # the loss itself in FP32
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            curve.append(loss.item())
        losses[mode] = tuple(curve)
        param_dtype[mode] = str(next(model.parameters()).dtype).removeprefix("torch.")
        act_dtype[mode] = str(out.dtype).removeprefix("torch.")
    return PrecisionRun(config=cfg.to_dict(), lr=lr, losses=losses, param_dtype=param_dtype,
                        activation_dtype=act_dtype)

"""Mixed precision: formats from torch.finfo, real casts, real backward passes under autocast."""
from __future__ import annotations

import math

import pytest

from dpviz.core.config import RunConfig
from dpviz.core.record import load, save
from dpviz.lessons.precision.live import (
    FORMATS, PrecisionRun, bit_fields, cast, cast_table, dynamic_scaling, float_format,
    format_table, gradient_underflow, train_precision,
)
from dpviz.lessons.precision.records import final_gap

CFG = RunConfig(world_size=1, layers=4, width=128, batch_per_rank=64)


@pytest.mark.parametrize("name, exponent, mantissa", [("float32", 8, 23), ("float16", 5, 10),
                                                       ("bfloat16", 8, 7)])
def test_layouts_from_finfo(name, exponent, mantissa):
    fmt = float_format(name)
    assert (fmt.exponent_bits, fmt.mantissa_bits) == (exponent, mantissa)
    assert fmt.max == pytest.approx((2 - 2 ** -mantissa) * 2.0 ** (2 ** (exponent - 1) - 1))


@pytest.mark.parametrize("name", FORMATS)
def test_range_edges_are_real(name):
    fmt = float_format(name)
    tiny = fmt.smallest_subnormal
    assert cast([tiny, tiny / 2, fmt.max, fmt.max * 2], name) == [tiny, 0.0, fmt.max, math.inf]


def test_bit_fields():
    assert bit_fields(1.0, "float32") == ("0", "01111111", "0" * 23)
    assert bit_fields(-2.0, "float16") == ("1", "10000", "0" * 10)
    # bf16 is fp32's top 16 bits: same sign and exponent, mantissa truncated/rounded to 7 bits
    assert bit_fields(0.15625, "bfloat16") == ("0", "01111100", "0100000")


def test_format_table_records_what_torch_reports_so_figures_draw_without_it():
    table = format_table(-2.0, ("float16", "bfloat16"))
    assert table.formats == (float_format("float16"), float_format("bfloat16"))
    assert table.bits == (("1", "10000", "0" * 10), ("1", "10000000", "0" * 7))


def test_fp16_overflows_and_underflows_where_bf16_does_not():
    table = cast_table([70000.0, 1e-8])
    assert table["float16"] == [math.inf, 0.0]
    assert math.isfinite(table["bfloat16"][0]) and table["bfloat16"][1] > 0


def test_loss_scaling_rescues_underflowing_gradients():
    u = gradient_underflow(CFG, loss_weight=2.0 ** -14, scale=2.0 ** 16)
    z = u.zero_fraction
    assert z["fp16"] > z["fp32"] + 0.5          # most small gradients flushed to zero in fp16
    assert abs(z["fp16_scaled"] - z["fp32"]) < 0.01
    assert u.rel_error["fp16_scaled"] < 0.01 < u.rel_error["fp16"]
    assert sum(u.hist_fp32) == sum(u.hist_scaled) > 0
    assert u.fp16 == float_format("float16")    # the floor the figure marks, kept in the result


def test_grad_scaler_backs_off_from_overflow_then_settles():
    run = dynamic_scaling(CFG, steps=16, init_scale=2.0 ** 30, growth_interval=4)
    assert run.skipped[0]
    for i in range(len(run.scales) - 1):
        if run.skipped[i]:
            assert run.scales[i + 1] == run.scales[i] / 2
    assert not all(run.skipped) and run.scales[-1] < 2.0 ** 30


def test_bf16_autocast_keeps_fp32_master_weights_and_trains_like_fp32(tmp_path):
    run = train_precision(CFG, steps=30, modes=("fp32", "bf16"))
    assert run.param_dtype == {"fp32": "float32", "bf16": "float32"}
    assert run.activation_dtype == {"fp32": "float32", "bf16": "bfloat16"}
    assert run.losses["bf16"][-1] < 0.5 * run.losses["bf16"][0]
    assert run.losses["bf16"] != run.losses["fp32"]     # really ran in another precision
    assert final_gap(run, "bf16") < 0.1
    assert load(save(run, tmp_path / "p.json"), PrecisionRun) == run
    with pytest.raises(ValueError, match="not in this run"):
        final_gap(run, "fp16")


@pytest.mark.parametrize("verb", ["gradient_underflow", "dynamic_scaling", "train_precision"])
def test_precision_verbs_refuse_a_model_they_would_not_train(verb):
    """They train the built-in MLP in one process: another model would be ignored while the
    record's config names it, so it is refused before any work."""
    from dpviz.lessons.precision import live as precision

    with pytest.raises(ValueError, match="trains the built-in MLP only"):
        getattr(precision, verb)(RunConfig(model="gpt"))

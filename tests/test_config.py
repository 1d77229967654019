"""Bad input is refused with a message that says how to fix it, before anything spawns."""
from __future__ import annotations

import os

import pytest

from dpviz import RunConfig
from dpviz.core.config import max_cpu_ranks, validate, writable_dir
from dpviz.engine.launch import rank_device


@pytest.mark.parametrize("changes, message", [
    (dict(world_size=0), "ranks must be between 1"),
    (dict(world_size=max_cpu_ranks() + 1), "at most"),
    (dict(world_size="4"), "whole number"),
    (dict(steps=0), "steps must be"),
    (dict(bucket_cap_mb=0), "bucket_cap_mb must be a number > 0"),
    (dict(bucket_cap_mb=-1.0), "bucket_cap_mb"),
    (dict(accum_steps=0), "accum_steps"),
    (dict(backend="mpi"), "unknown backend 'mpi'"),
    (dict(no_sync="sometimes"), "no_sync must be one of"),
    (dict(checkpoint_every=99), "checkpoint_every"),
    (dict(profile="yes"), "True or False"),
    (dict(checks=0), "checks must be True or False"),
    (dict(warmup="cheap"), "warmup must be one of full, light"),
    (dict(steps=2, profile_from=1, warmup="light"), "pass checks=False"),
    (dict(device="tpu"), "unknown device 'tpu'"),
    (dict(backend="nccl", device="cpu"), "device must be cuda"),
])
def test_bad_configs_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        validate(RunConfig(**changes))


def test_replace_validates_and_round_trips():
    cfg = RunConfig().replace(world_size=4, bucket_cap_mb=1)
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown RunConfig fields"):
        RunConfig.from_dict({**cfg.to_dict(), "wrold_size": 2})


def test_a_sliders_config_says_its_warmup_is_light_and_round_trips_through_json():
    """for_slider names its cheaper warm-up in the config (kept in every record); a record
    written before the field existed loads as the full warm-up it ran."""
    import json

    from dpviz.core.config import for_slider

    cfg = for_slider(RunConfig(steps=2))
    assert (cfg.warmup, cfg.profile_from, cfg.checks) == ("light", 1, False)
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    old = {k: v for k, v in RunConfig().to_dict().items() if k != "warmup"}
    assert RunConfig.from_dict(old).warmup == "full"


def test_output_paths_are_checked(tmp_path):
    assert writable_dir(tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        writable_dir(tmp_path / "file")
    if os.geteuid() != 0:  # root may write anywhere
        (tmp_path / "ro").mkdir(mode=0o500)
        with pytest.raises(ValueError, match="not writable"):
            writable_dir(tmp_path / "ro")


def test_the_device_follows_the_backend_unless_given():
    assert RunConfig().device == "cpu" and RunConfig(backend="nccl").device == "cuda"
    old = {k: v for k, v in RunConfig().to_dict().items() if k != "device"}   # a record from before
    assert RunConfig.from_dict(old).device == "cpu"
    assert rank_device(3, "cuda", 2) == "cuda:1" and rank_device(1, "cuda", 4) == "cuda:1"
    assert rank_device(1, "cpu", 0) == "cpu"


def test_a_config_prints_as_one_line_of_what_differs():
    """Issue 30: `print(cfg)` dumped four lines of defaults in 03 and 04."""
    cfg = RunConfig(steps=4, layers=24, bucket_cap_mb=1.0, link="classroom")
    assert str(cfg) == ("RunConfig(steps=4, layers=24, bucket_cap_mb=1.0); "
                        "emulated link classroom: 0.5 Gb/s, α 2000 µs")
    assert str(RunConfig(model="gpt")) == "RunConfig(model='gpt'); raw loopback (no emulated link)"
    assert "\n" not in str(RunConfig(slow_rank=1, delay_ms=5.0)) and repr(cfg).startswith("RunConfig(world_size=")

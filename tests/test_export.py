"""`dpviz animate all`: fresh live runs → records → videos, one scene checked end to end."""
from __future__ import annotations

import pytest

from dpviz import load
from dpviz.app.animate import SCENES
from dpviz.app.export import export_all


@pytest.mark.manim
def test_export_records_live_then_renders_a_real_video(tmp_path):
    [video] = export_all(tmp_path, names=["accumulation"])
    assert video == tmp_path / "accumulation.mp4"
    assert video.stat().st_size > 10_000 and video.read_bytes()[4:8] == b"ftyp"  # an mp4
    record = load(tmp_path / "accumulation" / "record.json")
    assert [m.all_reduces > 0 for m in record.micro_steps[:4]] == [False, False, False, True]


def test_unknown_scenes_are_refused_before_any_run(tmp_path):
    with pytest.raises(ValueError, match="unknown scenes"):
        export_all(tmp_path, names=["ring", "fireworks"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.manim
def test_animate_all_builds_every_scene_from_fresh_runs_with_progress(tmp_path, capsys):
    """Every scene from its own fresh record, built frame by frame (a dry run: the encoder is
    the same for every scene, and test_export_records_live_then_renders_a_real_video runs it),
    through the command line's `main` in this process (tests/test_cli.py runs `python -m dpviz`
    as a process of its own)."""
    from dpviz.app.cli import main

    code = main(["animate", "all", "--dry-run", "--out", str(tmp_path)])
    out = capsys.readouterr()
    assert code == 0, out.err
    for name in SCENES:
        assert (tmp_path / name / SCENES[name].record_file).is_file(), name   # its fresh record
        assert f"{name}: recorded in" in out.out + out.err and "(dry run)" in out.out + out.err
    assert not list(tmp_path.glob("*.mp4"))                          # a dry run writes no video
    assert "scene/s" in out.err or "s/scene" in out.err              # tqdm's progress bar


@pytest.mark.manim
def test_png_format_writes_one_still_per_section_for_slides(tmp_path):
    """Ring on 2 ranks: inputs, reduce-scatter, all-gather, result = four sections, four PNGs."""
    import numpy as np
    from PIL import Image

    from dpviz.app.animate import render
    from dpviz.lessons.collectives.execute import record_collective

    record_collective("ring", elements=4, world_size=2, out=tmp_path / "run")
    folder = render("ring", tmp_path / "run" / "ring.json", tmp_path / "slides", fmt="png")
    stills = sorted(folder.glob("*.png"))
    assert [p.name[:3] for p in stills] == ["00-", "01-", "02-", "03-"]
    assert stills[0].name == "00-inputs.png" and stills[-1].name == "03-result.png"
    frames = [np.asarray(Image.open(p).convert("RGB"), dtype=np.int16) for p in stills]
    assert frames[0].shape[1] >= 640                                  # a real frame, low quality
    assert all(np.abs(a - b).max() > 30 for a, b in zip(frames, frames[1:]))  # each step differs

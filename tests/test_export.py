"""`dpviz animate all`: fresh live runs → records → videos, one scene checked end to end."""
from __future__ import annotations

import pytest

from dpviz import load
from dpviz.export import export_all


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

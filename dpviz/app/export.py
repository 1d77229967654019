"""Every animation from fresh live runs, for teachers who want the videos.

Orchestration only: each scene's record is made by the run that owns it (a ring on 4 ranks,
DDP runs on 2, a checkpointing sweep on 1), saved beside the video, then rendered by `animate`.
"""
from __future__ import annotations

import importlib
import os
import time
from pathlib import Path

from dpviz.app.animate import SCENES, render
from dpviz.core.config import writable_dir

FACADE = ("export_all",)  # what `dpviz.<name>` offers from here


def record_scene_data(name: str, folder: Path) -> None:
    """Run live what scene `name` draws, writing its record into `folder` (its `RECORDED_BY`)."""
    spec = SCENES[name]
    module, _, verb = spec.recorded_by.partition(":")
    getattr(importlib.import_module(module), verb)(**spec.recorded_with, out=folder)


def export_all(out: str | os.PathLike, fmt: str = "mp4", quality: str = "low",
               names: list[str] | None = None, dry_run: bool = False) -> list[Path]:
    """Record each scene's data live, then render it; returns the video paths (none with
    `dry_run`: every scene is built from its fresh record, nothing is encoded)."""
    from tqdm import tqdm

    names = list(SCENES) if names is None else names
    unknown = set(names) - set(SCENES)
    if unknown:
        raise ValueError(f"unknown scenes {sorted(unknown)}; choose from {', '.join(SCENES)}")
    out_dir = writable_dir(out)
    videos = []
    for name in (bar := tqdm(names, unit="scene")):
        folder = writable_dir(out_dir / name)
        bar.set_description(f"{name}: recording live")
        t0 = time.perf_counter()
        record_scene_data(name, folder)
        t1 = time.perf_counter()
        bar.set_description(f"{name}: rendering")
        target = out_dir / (f"{name}-slides" if fmt == "png" else f"{name}.{fmt}")  # png: a folder
        video = render(name, folder / SCENES[name].record_file, target, fmt=fmt, quality=quality, dry_run=dry_run)
        videos += [video] if video else []
        bar.write(f"{name}: recorded in {t1 - t0:.1f} s, " + (f"built in {time.perf_counter() - t1:.1f} s (dry run)"
                  if dry_run else f"rendered in {time.perf_counter() - t1:.1f} s → {video}"))
    return videos

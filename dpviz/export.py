"""Every animation from fresh live runs, for teachers who want the videos.

Orchestration only: each scene's record is made by the run that owns it (a ring on 4 ranks,
DDP runs on 2, a checkpointing sweep on 1), saved beside the video, then rendered by `animate`.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from .animate import SCENES, render
from .config import RunConfig, writable_dir


def _ring(folder: Path) -> None:
    from .collectives.execute import record_collective

    record_collective("ring", elements=16, world_size=4, out=folder)


def _ddp(**changes) -> Callable[[Path], None]:
    def record(folder: Path) -> None:
        from .ddp_run import run

        run(RunConfig(world_size=2, **changes), out=folder)

    return record


def _checkpointing(folder: Path) -> None:
    from .checkpointing import DEMO_CONFIG, measure_checkpointing

    measure_checkpointing(DEMO_CONFIG, checkpoint_every=(0, 2, 4, 8), out=folder)


# What each scene draws: the live run that records it.
RECORDERS: dict[str, Callable[[Path], None]] = {
    "ring": _ring,
    "buckets": _ddp(steps=3, layers=24, width=256, batch_per_rank=128, bucket_cap_mb=1.0),
    "accumulation": _ddp(steps=2, accum_steps=4, bucket_cap_mb=0.25),
    "checkpointing": _checkpointing,
}


def export_all(out: str | os.PathLike, fmt: str = "mp4", quality: str = "low",
               names: list[str] | None = None) -> list[Path]:
    """Record each scene's data live, then render it; returns the video paths."""
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
        RECORDERS[name](folder)
        t1 = time.perf_counter()
        bar.set_description(f"{name}: rendering")
        target = out_dir / (f"{name}-slides" if fmt == "png" else f"{name}.{fmt}")  # png: a folder
        videos.append(render(name, folder / SCENES[name].record_file, target, fmt=fmt, quality=quality))
        bar.write(f"{name}: recorded in {t1 - t0:.1f} s, rendered in {time.perf_counter() - t1:.1f} s "
                  f"→ {videos[-1]}")
    return videos

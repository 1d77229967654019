"""Export manim scenes drawn from records: `dpviz animate NAME --record FILE --out FILE`.

Scenes live in the checkout's `animations/` folder (one module per subject) and read
records only, so an animation can be re-rendered from a saved run without any ranks.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .record import load

FORMATS = ("mp4", "gif", "png")  # png: a folder with one still per section, for slides
QUALITIES = ("low", "medium", "high")


@dataclass(frozen=True)
class SceneSpec:
    module: str        # file in animations/, without .py
    cls: str           # Scene class in it
    record_file: str   # what `dpviz animate all` records first (file name in a run folder)


SCENES = {
    "ring": SceneSpec("ring", "RingAllReduce", "ring.json"),
    "buckets": SceneSpec("buckets", "BucketOverlap", "record.json"),
    "accumulation": SceneSpec("accumulation", "AccumulationSchedule", "record.json"),
    "checkpointing": SceneSpec("checkpointing", "CheckpointMemory", "checkpointing.json"),
}


def animations_dir() -> Path:
    """The checkout's animations/ folder (scenes are not installed with the package)."""
    folder = Path(__file__).resolve().parents[1] / "animations"
    if not folder.is_dir():
        raise FileNotFoundError(f"no animations/ folder beside the dpviz package ({folder}): "
                                "animations render from a source checkout")
    return folder


def scene_class(name: str):
    """Import the Scene class registered under `name`."""
    if name not in SCENES:
        raise ValueError(f"unknown scene {name!r}; choose one of {', '.join(SCENES)}")
    spec = SCENES[name]
    folder = animations_dir()
    path = folder / f"{spec.module}.py"
    if not path.is_file():
        raise FileNotFoundError(f"scene file {path} is missing")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))  # scenes import their shared `common` module
    module_spec = importlib.util.spec_from_file_location(f"dpviz_animations.{spec.module}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, spec.cls)


def render(name: str, record_path: str | os.PathLike, out: str | os.PathLike | None = None,
           fmt: str = "mp4", quality: str = "low", dry_run: bool = False) -> Path | None:
    """Render scene `name` from a record into `out` (or only check it builds, with dry_run)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if quality not in QUALITIES:
        raise ValueError(f"unknown quality {quality!r}; choose one of {', '.join(QUALITIES)}")
    if out is None and not dry_run:
        raise ValueError("give an output file (--out FILE.mp4), or use dry_run")
    if not Path(record_path).is_file():
        raise FileNotFoundError(f"no such file: {record_path}")
    cls = scene_class(name)
    record = load(record_path, expect=cls.RECORD_TYPE)
    from manim import tempconfig

    with tempfile.TemporaryDirectory(prefix="dpviz-manim-") as media:
        settings = {"quality": f"{quality}_quality", "format": "mp4" if fmt == "png" else fmt,
                    "save_sections": fmt == "png", "media_dir": media,
                    "disable_caching": True, "progress_bar": "none", "verbosity": "WARNING",
                    "dry_run": dry_run}
        with tempconfig(settings):
            scene = cls(record=record)
            scene.render()
            if dry_run:  # nothing was written: the writer has no file path to give
                return None
            writer = scene.renderer.file_writer
            if fmt == "png":
                return section_stills(writer, Path(out))
            produced = writer.gif_file_path if fmt == "gif" else writer.movie_file_path
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(produced), out)
    return out


def section_stills(writer, folder: Path) -> Path:
    """The last frame of every section the scene marked (`self.next_section(name)`) as
    `NN-name.png` in `folder`: what a slide shows once that step has played."""
    import av

    folder.mkdir(parents=True, exist_ok=True)
    shown = [s for s in writer.sections if s.video and s.get_clean_partial_movie_files()]
    for i, section in enumerate(shown):
        with av.open(str(writer.sections_output_dir / section.video)) as video:
            *_, last = video.decode(video=0)
        slug = re.sub(r"[^a-z0-9]+", "-", section.name.lower()).strip("-") or "section"
        last.to_image().save(folder / f"{i:02d}-{slug}.png")
    return folder

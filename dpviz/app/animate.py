"""Export manim scenes drawn from records: `dpviz animate NAME --record FILE --out FILE`.

Scenes live in the checkout's `animations/` folder (one module per subject) and read
records only, so an animation can be re-rendered from a saved run without any ranks.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dpviz.core.record import load

FORMATS = ("mp4", "gif", "png")  # png: a folder with one still per section, for slides
QUALITIES = ("low", "medium", "high")


@dataclass(frozen=True)
class SceneSpec:
    module: str          # file in animations/, without .py: the scene's name on the command line
    cls: str             # the RecordScene subclass in it
    recorded_by: str     # "module:verb" that `dpviz animate all` runs live, with out=FOLDER
    recorded_with: dict  # the verb's other keyword arguments
    record_file: str     # the file that run writes, which the scene draws


def animations_dir() -> Path:
    """The checkout's animations/ folder (scenes are not installed with the package)."""
    return Path(__file__).resolve().parents[2] / "animations"


def discover_scenes(folder: Path) -> dict[str, SceneSpec]:
    """Each `RecordScene` subclass in `folder`/*.py, found by reading the files (manim is not
    imported): the file names the scene, its `RECORDED_BY` and `RECORD_FILE` say how
    `dpviz animate all` records it. One scene per file."""
    found: dict[str, SceneSpec] = {}
    for path in sorted(folder.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and any(getattr(base, "id", None) == "RecordScene"
                                                      for base in node.bases):
                if path.stem in found:
                    raise ValueError(f"{path} holds two scenes: one scene per file, named by the file")
                found[path.stem] = _spec(path, node)
    return found


def _spec(path: Path, scene: ast.ClassDef) -> SceneSpec:
    attrs = {target.id: stmt.value for stmt in scene.body if isinstance(stmt, ast.Assign)
             for target in stmt.targets if isinstance(target, ast.Name)}
    missing = {"RECORDED_BY", "RECORD_FILE"} - set(attrs)
    if missing:
        raise ValueError(f"scene {scene.name} in {path} needs {' and '.join(sorted(missing))} "
                         "(how `dpviz animate all` records what it draws)")
    verb, kwargs = ast.literal_eval(attrs["RECORDED_BY"])
    return SceneSpec(path.stem, scene.name, verb, kwargs, ast.literal_eval(attrs["RECORD_FILE"]))


SCENES = discover_scenes(animations_dir()) if animations_dir().is_dir() else {}


def scene_class(name: str):
    """Import the Scene class of scene `name` from its file in animations/."""
    if name not in SCENES:
        choices = ", ".join(SCENES) or "none: scenes render from a checkout with animations/"
        raise ValueError(f"unknown scene {name!r}; choose one of {choices}")
    spec = SCENES[name]
    path = animations_dir() / f"{spec.module}.py"
    module_spec = importlib.util.spec_from_file_location(f"dpviz_animations.{spec.module}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, spec.cls)


# A dry run builds every animation frame by frame, at this many frames a second: each
# animation's objects are made and updated through its run, in a fraction of a video's frames.
DRY_RUN_FPS = 5


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
                    "dry_run": dry_run, **({"frame_rate": DRY_RUN_FPS} if dry_run else {})}
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

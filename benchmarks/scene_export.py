"""Each manim scene's low-quality export from a fresh live record, timed (aim: ≤ 60 s each).

Recording and rendering are timed apart, so a slow scene is not blamed on its run.
Usage: python benchmarks/scene_export.py [--quality low]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from dpviz.app.animate import SCENES, render
from dpviz.app.export import record_scene_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quality", default="low")
    args = parser.parse_args()
    print(f"{'scene':14s} {'record s':>9s} {'render s':>9s} {'video MB':>9s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in SCENES.items():
            folder = Path(tmp) / name
            t0 = time.perf_counter()
            record_scene_data(name, folder)
            t1 = time.perf_counter()
            video = render(name, folder / spec.record_file, Path(tmp) / f"{name}.mp4", quality=args.quality)
            t2 = time.perf_counter()
            print(f"{name:14s} {t1 - t0:9.1f} {t2 - t1:9.1f} {video.stat().st_size / 1e6:9.2f}"
                  f"   render / 60 s aim = {(t2 - t1) / 60:.2f}")


if __name__ == "__main__":
    main()

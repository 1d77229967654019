"""`dpviz animate NAME --record FILE --out FILE`: export a manim scene drawn from a record.

`dpviz animate all --out DIR` records every scene's data from fresh live runs, then renders
them all into DIR (with progress; `--dry-run` builds each scene from its record, writes no video).
"""
from __future__ import annotations

from dpviz.app.animate import FORMATS, QUALITIES, SCENES, render

NAME = "animate"
HELP = ("render a manim animation (mp4, gif, or png: one still per section for slides) from a "
        "recorded run, or all of them from fresh runs")


def add_arguments(p) -> None:
    p.add_argument("scene", choices=sorted(SCENES) + ["all"], help="which animation ('all': every one, from fresh live runs)")
    p.add_argument("--record", help="record file written by a dpviz command (not with 'all')")
    p.add_argument("--out", help="output file, e.g. ring.mp4 or ring.gif; a folder with 'all' or --format png")
    p.add_argument("--format", choices=FORMATS, help="mp4, gif, or png (a folder of NN-section.png stills); default: from --out's suffix, else mp4")
    p.add_argument("--quality", choices=QUALITIES, default="low")
    p.add_argument("--dry-run", action="store_true", help="build every scene frame by frame (at a few frames a second), write nothing")


def main(args) -> int:
    if args.scene == "all":
        from dpviz.app.export import export_all

        if args.record:
            raise ValueError("'all' records its own data from fresh runs: drop --record")
        out = args.out or "out/animations"
        videos = export_all(out, fmt=args.format or "mp4", quality=args.quality, dry_run=args.dry_run)
        print(f"every scene builds from its fresh record in {out}/ (dry run)" if args.dry_run
              else f"wrote {len(videos)} videos to {out}/")
        return 0
    if not args.record:
        raise ValueError(f"give the record to draw: dpviz animate {args.scene} --record FILE --out FILE")
    fmt = args.format or (args.out.rsplit(".", 1)[-1] if args.out and args.out.endswith(FORMATS) else "mp4")
    path = render(args.scene, args.record, args.out, fmt=fmt, quality=args.quality, dry_run=args.dry_run)
    print(f"{args.scene}: scene builds (dry run)" if path is None else f"wrote {path}"
          + (f"/ ({len(list(path.glob('*.png')))} stills)" if fmt == "png" else ""))
    return 0

"""`dpviz animate NAME --record FILE --out FILE`: export a manim scene drawn from a record."""
from __future__ import annotations

from ..animate import FORMATS, QUALITIES, SCENES, render

NAME = "animate"
HELP = "render a manim animation (mp4 or gif) from a recorded run"


def add_arguments(p) -> None:
    p.add_argument("scene", choices=sorted(SCENES), help="which animation")
    p.add_argument("--record", required=True, help="record file written by a dpviz command")
    p.add_argument("--out", help="output file, e.g. ring.mp4 or ring.gif")
    p.add_argument("--format", choices=FORMATS, help="default: from --out's suffix, else mp4")
    p.add_argument("--quality", choices=QUALITIES, default="low")
    p.add_argument("--dry-run", action="store_true", help="build every frame's objects, write nothing")


def main(args) -> int:
    fmt = args.format or (args.out.rsplit(".", 1)[-1] if args.out and args.out.endswith(FORMATS) else "mp4")
    path = render(args.scene, args.record, args.out, fmt=fmt, quality=args.quality, dry_run=args.dry_run)
    print(f"{args.scene}: scene builds (dry run)" if path is None else f"wrote {path}")
    return 0

"""`dpviz load-trace PATH... [--out DIR]`: your own job's profiler traces → a dpviz record."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from contextlib import nullcontext
from pathlib import Path

from dpviz.app.figure_process import FigureProcess, can_fork
from dpviz.core.arguments import comma_list
from dpviz.plots.files import FIGURE_FORMATS

NAME = "load-trace"
HELP = "read per-rank PyTorch profiler traces (.json/.json.gz, NCCL or gloo) into a dpviz record"


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="one trace file per rank, or a folder of them")
    p.add_argument("--ranks", type=comma_list(int), help="rank of each file, in order, for "
                   "traces without distributedInfo (e.g. 0,1); one such file alone is rank 0")
    p.add_argument("--out", help="folder for record.json, summary.json, and the timeline and "
                   "collectives figures; written only when everything succeeded")
    p.add_argument("--formats", type=_formats, default=("png",),
                   help=f"figure formats, comma-separated, from {','.join(FIGURE_FORMATS)} "
                        "(default: png)")


def _formats(text: str) -> tuple[str, ...]:
    chosen = tuple(comma_list(str)(text))
    unknown = sorted(set(chosen) - set(FIGURE_FORMATS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown formats {unknown}: choose from "
                                         f"{','.join(FIGURE_FORMATS)}")
    return chosen


def main(args) -> int:
    out = checked_out_dir(args.out) if args.out else None   # fail before the (long) read
    with FigureProcess() if out is not None and can_fork() else nullcontext() as figures:
        return _load(args, out, figures)


def _load(args, out: Path | None, figures: FigureProcess | None) -> int:
    # imported only now, after the figure process forked: these imports run beside its own
    from dpviz.analysis.overlap import analysed_steps, describe, record_ranks
    from dpviz.analysis.scan import COMM_KINDS
    from dpviz.analysis.trace_files import load_trace

    record = load_trace(args.paths, ranks=args.ranks)
    print("\n".join(record.notes))
    print(describe(record))
    step, rank = analysed_steps(record).steps[-1], record_ranks(record)[0]
    for s in sorted((s for s in record.spans_of(rank=rank, step=step) if s.kind in COMM_KINDS),
                    key=lambda s: s.start_us):
        size = "size not recorded" if s.bytes is None else f"{s.bytes / 2**20:7.2f} MiB"
        what = f"{s.op} bucket {s.bucket}" if s.bucket is not None else s.op
        print(f"step {step} rank {rank} {what}: {size} in {s.dur_us / 1e3:.2f} ms")
    if out is not None:
        names = _write_staged(record, out, args.formats, figures)
        print(f"wrote {out}/{', '.join(names)}")
    return 0


def checked_out_dir(path: str | os.PathLike) -> Path:
    """An output folder that can be written, checked without creating it (a failed run
    leaves nothing behind)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output path {out} exists and is not a folder")
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ValueError(f"cannot create output folder {out}: {parent} is not a writable folder")
    return out


def _write_staged(record, out: Path, formats: tuple[str, ...],
                  figures: FigureProcess | None = None) -> list[str]:
    """Write every output into a hidden folder beside `out`, then move the files in: a
    failure on the way leaves neither `out` nor part of its files."""
    base = out if out.exists() else next(p for p in out.parents if p.exists())
    staging = Path(tempfile.mkdtemp(prefix=".dpviz-load-trace-", dir=base))
    try:
        _write(record, staging, formats, figures)
        out.mkdir(parents=True, exist_ok=True)
        names = sorted(p.name for p in staging.iterdir())
        for name in names:
            os.replace(staging / name, out / name)
        return names
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write(record, out: Path, formats: tuple[str, ...], figures: FigureProcess | None) -> None:
    """record.json, summary.json and the figures, drawn by `figures` if given, else here."""
    from dpviz.analysis.overlap import analysed_steps
    from dpviz.core.record import save
    from dpviz.app.figure_process import draw_figure, figures_to_draw
    from dpviz.analysis.summary import write_summary

    step = analysed_steps(record).steps[-1]
    names, left_out = figures_to_draw(record, step)
    if left_out:
        print(left_out)
    if figures is not None:
        figures.send(record, step, names, out, formats)   # drawn while the files below are written
    save(record, out / "record.json")
    write_summary(record, out / "summary.json")
    if figures is not None:
        figures.wait()
    else:
        for name in names:
            draw_figure(record, step, name, out, formats)

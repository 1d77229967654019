"""`dpviz load-trace PATH... [--out DIR]`: your own job's profiler traces → a dpviz record."""
from __future__ import annotations

from ..config import writable_dir
from .files import load_trace
from ..record import save
from .summary import write_summary
from ..overlap import describe, record_ranks, steady_steps
from ..trace import COMM_KINDS
from ..commands._args import comma_list

NAME = "load-trace"
HELP = "read per-rank PyTorch profiler traces (.json/.json.gz, NCCL or gloo) into a dpviz record"


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="one trace file per rank")
    p.add_argument("--ranks", type=comma_list(int), help="rank of each file, in order, for "
                   "traces without distributedInfo (e.g. 0,1)")
    p.add_argument("--out", help="folder for record.json, summary.json, and the timeline and "
                   "allreduce-sizes figures (PNG, SVG, PDF)")


def main(args) -> int:
    out = writable_dir(args.out) if args.out else None   # fail before the (long) read
    record = load_trace(args.paths, ranks=args.ranks)
    print("\n".join(record.notes))
    print(describe(record))
    step, rank = steady_steps(record)[-1], record_ranks(record)[0]
    for s in sorted((s for s in record.spans_of(rank=rank, step=step) if s.kind in COMM_KINDS),
                    key=lambda s: s.start_us):
        size = "size not recorded" if s.bytes is None else f"{s.bytes / 2**20:7.2f} MiB"
        what = f"{s.op} bucket {s.bucket}" if s.bucket is not None else s.op
        print(f"step {step} rank {rank} {what}: {size} in {s.dur_us / 1e3:.2f} ms")
    if out is not None:
        _write(record, out)
    return 0


def _write(record, out) -> None:
    import matplotlib

    matplotlib.use("Agg")   # a CLI writes files; no window
    from .plots import plot_allreduce_sizes
    from ..plots.files import save_figure
    from ..plots.timeline import plot_timeline

    save(record, out / "record.json")
    write_summary(record, out / "summary.json")
    save_figure(plot_timeline(record).figure, out / "timeline")
    has_comm = any(s.kind in COMM_KINDS for s in record.spans)
    if has_comm:
        save_figure(plot_allreduce_sizes(record).figure, out / "allreduce-sizes")
    print(f"wrote {out}/record.json, summary.json, timeline.png|svg|pdf"
          + (", allreduce-sizes.png|svg|pdf" if has_comm else ""))

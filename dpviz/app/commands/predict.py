"""`dpviz predict RECORD|TRACES… --ranks N --link PRESET --bucket-cap-mb C [--accum-steps K] --out DIR`:
one recorded step predicted at another world size, link, cap and accumulation."""
from __future__ import annotations

from pathlib import Path

from dpviz.core.config import writable_dir
from dpviz.core.link import REDUCTIONS, link_from_options
from dpviz.core.record import RunRecord, load
from dpviz.lessons.what_if.records import RECORDED, SCALING_CAPS, WIRES, WORLD_SIZES

NAME = "predict"
HELP = ("predict a recorded step (a run folder, record.json or profiler traces) at another world "
        "size, link, bucket cap and accumulation: a model, with its scaling table")


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="RECORD|TRACE",
                   help="a dpviz run folder or record.json, or what load-trace takes: profiler trace files "
                        "(one per rank) or folders of them")
    p.add_argument("--ranks", type=int, default=None, metavar="N", help="world size to predict (default: recorded)")
    p.add_argument("--link", default=None, metavar="PRESET",
                   help="link preset (1GbE, 10GbE, 100GbE, PCIe, NVLink-ish, classroom; default: the recorded "
                        "link, or the one fitted to a GPU trace's all-reduces)")
    p.add_argument("--link-gbps", type=float, default=None, metavar="G", help="link bandwidth, Gb/s")
    p.add_argument("--link-latency-us", type=float, default=None, metavar="L", help="link α, µs")
    p.add_argument("--bucket-cap-mb", type=float, default=None, metavar="C", help="bucket cap, MiB (default: recorded)")
    p.add_argument("--accum-steps", type=int, default=None, metavar="K", help="micro-steps per step (default: recorded)")
    p.add_argument("--wire", choices=WIRES, default="ring",
                   help="how α is paid: once per each of the ring's 2(N-1) messages (ring, a cluster; default) "
                        "or once per bucket (transfer, dpviz's emulated link)")
    p.add_argument("--reduction", choices=(*REDUCTIONS, RECORDED), default=None,
                   help="the target's reduction inside the all-reduce: a device's memory bandwidth (quoted "
                        "presets), none, or recorded (this machine's measured costs); default: recorded when "
                        "the link is the recorded one, else none")
    p.add_argument("--compute", type=float, default=1.0, metavar="FACTOR",
                   help="the recorded compute times this factor (0.1: a device ten times faster; default 1)")
    p.add_argument("--out", default=None, help="folder for prediction.json, prediction.png, scaling.json, scaling.txt")


def read_source(paths: list[str]) -> RunRecord:
    """A run folder (its record.json), a record file, or what `load-trace` takes: trace files
    or folders of them (`load_trace`)."""
    from dpviz.core.record import RecordError
    from dpviz.analysis.trace_files import load_trace

    if len(paths) == 1 and (Path(paths[0]) / "record.json").is_file():
        return load(Path(paths[0]) / "record.json", expect=RunRecord)
    if len(paths) == 1 and Path(paths[0]).is_file():
        try:
            return load(paths[0], expect=RunRecord)
        except RecordError as err:
            if "not a dpviz record" not in str(err):
                raise
    return load_trace(paths)


def main(args) -> int:
    from dpviz.lessons.what_if.learn import describe_fit, learn
    from dpviz.lessons.what_if.records import describe_prediction, format_scaling, predict, scaling

    out = writable_dir(args.out) if args.out else None
    if args.ranks is not None and args.ranks < 1:
        raise ValueError(f"--ranks must be >= 1, got {args.ranks}")
    given = (args.link, args.link_gbps, args.link_latency_us) != (None, None, None)
    link = link_from_options(args.link, args.link_gbps, args.link_latency_us) if given else RECORDED
    learned = learn(read_source(args.paths))
    prediction = predict(learned, world_size=args.ranks, link=link,
                         bucket_cap_mb=RECORDED if args.bucket_cap_mb is None else args.bucket_cap_mb,
                         accum_steps=args.accum_steps, wire=args.wire, reduction=args.reduction,
                         compute=args.compute)
    if learned.fit is not None:
        print(describe_fit(learned.fit))
    print(describe_prediction(prediction))
    print("not modelled: " + "; ".join(prediction.not_modelled))
    table_link = link if link != RECORDED else learned.link
    table = None
    if table_link is not None:
        sizes = sorted({*WORLD_SIZES, prediction.world_size})
        table = scaling(learned, link=table_link, world_sizes=sizes, caps=SCALING_CAPS, wire=args.wire,
                        accum_steps=args.accum_steps, reduction=prediction.config["reduction"],
                        compute=args.compute)
        print(format_scaling(table))
    if out is not None:
        _write(prediction, table, out)
    return 0


def _write(prediction, table, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")   # a CLI writes files; no window
    import matplotlib.pyplot as plt

    from dpviz.core.record import save
    from dpviz.lessons.what_if.plots import plot_predicted, plot_scaling
    from dpviz.lessons.what_if.records import format_scaling

    save(prediction, out / "prediction.json")
    ax = plot_predicted(prediction)
    ax.figure.savefig(out / "prediction.png", dpi=110)
    plt.close(ax.figure)
    written = ["prediction.json", "prediction.png"]
    if table is not None:
        save(table, out / "scaling.json")
        (out / "scaling.txt").write_text(format_scaling(table) + "\n")
        ax = plot_scaling(table)
        ax.figure.savefig(out / "scaling.png", dpi=110)
        plt.close(ax.figure)
        written += ["scaling.json", "scaling.txt", "scaling.png"]
    print(f"wrote {', '.join(str(out / name) for name in written)}")

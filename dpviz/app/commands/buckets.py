"""`dpviz buckets`: one live DDP run per bucket_cap_mb → DIR/sweep.json, DIR/sweep.png."""
from __future__ import annotations

from pathlib import Path

from dpviz.app.link_args import add_link_arguments, link_of
from dpviz.core.arguments import comma_list, positive_float, positive_int
from dpviz.core.config import writable_dir
from dpviz.core.record import save
from dpviz.lessons.buckets.live import check_sweep, sweep_buckets, sweep_config
from dpviz.lessons.buckets.records import format_sweep

NAME = "buckets"
HELP = "re-run DDP live for each bucket_cap_mb and record step time and exposed communication"


def add_arguments(p) -> None:
    d = sweep_config()
    p.add_argument("--ranks", type=positive_int, default=d.world_size, help="number of ranks (default %(default)s)")
    p.add_argument("--caps", type=comma_list(positive_float), default=[0.25, 1.0, 4.0, 25.0],
                   help="bucket_cap_mb values in MiB, e.g. 0.25,1,4,25 (default)")
    p.add_argument("--steps", type=positive_int, default=d.steps, help="steps per run; step 0 is left out (default %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=2, help="runs per cap, taken round-robin (default %(default)s)")
    p.add_argument("--layers", type=positive_int, default=d.layers, help="Linear+ReLU blocks (default %(default)s)")
    p.add_argument("--width", type=positive_int, default=d.width, help="hidden width (default %(default)s)")
    p.add_argument("--batch", type=positive_int, default=d.batch_per_rank, help="samples per rank per step (default %(default)s)")
    add_link_arguments(p)
    p.add_argument("--size-link", action="store_true",
                   help="first measure this workload's backward in runs with 1 MiB buckets on the ranks "
                        "and size an emulated link to it (all gradients cross in 1.5 backwards, alpha 5%% "
                        "of it: a teaching setting), as notebook 03 does; not with the --link options")
    p.add_argument("--out", required=True, help="folder for sweep.json and sweep.png|svg|pdf")


def main(args) -> int:
    from dpviz.engine.launch import using_cluster
    from dpviz.core.link import describe_link
    from dpviz.engine.link_sizing import size_link

    cfg = sweep_config(world_size=args.ranks, steps=args.steps, layers=args.layers, width=args.width,
                       batch_per_rank=args.batch, link=link_of(args))
    if args.size_link and cfg.link is not None:
        raise ValueError("--size-link sizes the link itself: drop --link/--link-gbps/--link-latency-us")
    check_sweep(cfg, args.caps, args.repeats)
    out = writable_dir(args.out)  # fail before any rank starts
    with using_cluster(None, cfg.world_size, cfg.backend, cfg.timeout_s) as cluster:   # as sweep_buckets starts them
        if args.size_link:
            cfg = cfg.replace(link=size_link(cfg.replace(bucket_cap_mb=1.0), cluster=cluster))   # as 03
            print(describe_link(cfg.link))
        result = sweep_buckets(cfg, cluster=cluster, caps=args.caps, repeats=args.repeats)
    save(result, out / "sweep.json")
    _figure(result, out / "sweep.png")
    print(format_sweep(result))
    print(f"wrote {out / 'sweep.json'} and {out / 'sweep'}.png|svg|pdf")
    return 0


def _figure(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.lessons.buckets.plots import plot_sweep
    from dpviz.plots.files import save_figure

    ax = plot_sweep(result)
    save_figure(ax.figure, path.with_suffix(""))
    plt.close(ax.figure)

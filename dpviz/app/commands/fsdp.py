"""`dpviz fsdp`: one FSDP2 step recorded live per unit and rank → fsdp.json and its figure."""
from __future__ import annotations

from pathlib import Path

from dpviz.app.link_args import add_link_arguments, link_of
from dpviz.core.arguments import positive_int

NAME = "fsdp"
HELP = ("record an FSDP2 (ZeRO-3) step live: each unit's all-gathers, compute and reduce-scatter per "
        "rank on an emulated link, and the gathered parameter bytes over time")
ON_OFF = {"on": True, "off": False}


def add_arguments(p) -> None:
    from dpviz.lessons.fsdp.live import DEMO_CONFIG, MODELS
    from dpviz.lessons.fsdp.records import GRANULARITIES

    d = DEMO_CONFIG
    p.add_argument("--model", choices=MODELS, default=d.model,
                   help="gpt (units: its embedding, each block, its head) or mlp (a unit per Linear) "
                        "(default %(default)s)")
    p.add_argument("--ranks", type=positive_int, default=d.world_size, help="number of ranks, 2 or more (default %(default)s)")
    p.add_argument("--steps", type=positive_int, default=d.steps,
                   help="Adam steps; the last is recorded, step 0 initialises FSDP (default %(default)s)")
    p.add_argument("--layers", type=positive_int, default=None, help="blocks of the model (default: the model's own)")
    p.add_argument("--width", type=positive_int, default=None, help="hidden size: GPT d_model, MLP features")
    p.add_argument("--batch", type=positive_int, default=None, help="samples per rank")
    p.add_argument("--seed", type=int, default=d.seed, help="weights and data seed (default %(default)s)")
    p.add_argument("--reshard-after-forward", choices=ON_OFF, default="on",
                   help="free each unit's gathered parameters after its forward (on) or keep them until "
                        "its backward (off) (default %(default)s)")
    p.add_argument("--prefetch", choices=ON_OFF, default="on",
                   help="issue the next unit's all-gather before the current unit computes (default %(default)s)")
    p.add_argument("--units", choices=GRANULARITIES, default="block",
                   help="a unit per block, or the whole model as one unit (default %(default)s)")
    add_link_arguments(p, default="classroom")
    p.add_argument("--out", required=True, help="folder for fsdp.json and fsdp.png|svg|pdf")


def main(args) -> int:
    from dpviz.core.config import writable_dir
    from dpviz.lessons.fsdp.live import DEMO_CONFIG, record_fsdp
    from dpviz.lessons.fsdp.records import describe

    sizes = dict(layers=args.layers, width=args.width, batch_per_rank=args.batch)
    cfg = DEMO_CONFIG.replace(model=args.model).replace(
        world_size=args.ranks, steps=args.steps, seed=args.seed, link=link_of(args),
        **{k: v for k, v in sizes.items() if v is not None})
    out = writable_dir(args.out)
    record = record_fsdp(cfg, reshard_after_forward=ON_OFF[args.reshard_after_forward],
                         prefetch=ON_OFF[args.prefetch], units=args.units, out=out)
    _figure(record, out / "fsdp")
    print(describe(record))
    print(f"wrote {out / 'fsdp.json'} and {out / 'fsdp'}.png|svg|pdf; animate it with "
          f"`dpviz animate fsdp --record {out / 'fsdp.json'} --out fsdp.mp4`")
    return 0


def _figure(record, stem: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.plots.files import save_figure
    from dpviz.lessons.fsdp.plots import plot_fsdp_step

    ax = plot_fsdp_step(record)
    save_figure(ax.figure, stem)
    plt.close(ax.figure)

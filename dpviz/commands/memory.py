"""`dpviz memory`: activation memory through one step, per checkpoint interval → memory.json."""
from __future__ import annotations

from ._args import comma_list, non_negative_int, positive_int

NAME = "memory"
HELP = "measure activation memory over forward+backward with a checkpoint every k blocks"


def add_arguments(p) -> None:
    from ..checkpointing import SIZES

    p.add_argument("--model", default="mlp",
                   help="mlp, gpt, cnn, or MODULE:FUNCTION returning a dpviz.Workload whose model has "
                        "`blocks` and a `head`; a segment is k blocks (default %(default)s)")
    sizes = "; ".join(f"{m} {l}, {w}, {b}" for m, (l, w, b) in SIZES.items())
    p.add_argument("--layers", type=positive_int, default=None,
                   help=f"blocks of a built-in model (default, then --width and --batch: {sizes})")
    p.add_argument("--width", type=positive_int, default=None,
                   help="hidden size: MLP features, GPT d_model, CNN channels")
    p.add_argument("--batch", type=positive_int, default=None, help="samples in the step")
    p.add_argument("--checkpoint-every", type=comma_list(non_negative_int), default=[0, 2, 4, 8],
                   help="k values, comma-separated; 0 = no checkpointing (default 0,2,4,8)")
    p.add_argument("--seed", type=int, default=0, help="weights and data seed (default %(default)s)")
    p.add_argument("--out", required=True, help="folder for memory.json and one trace per k")


def main(args) -> int:
    from ..checkpointing import measure
    from ..checkpointing_records import describe

    record = measure(layers=args.layers, width=args.width, batch=args.batch,
                     checkpoint_every=args.checkpoint_every, seed=args.seed, out=args.out,
                     model=args.model)
    print(describe(record))
    ks = ",".join(str(r.checkpoint_every) for r in record.rows)
    print(f"wrote {args.out}/memory.json and trace-k{{{ks}}}.json (open in ui.perfetto.dev)")
    return 0

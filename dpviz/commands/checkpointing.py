"""`dpviz checkpointing`: activation memory through one step, per checkpoint interval → checkpointing.json."""
from __future__ import annotations

from ._args import comma_list, non_negative_int, positive_int

NAME = "checkpointing"
HELP = "measure activation memory over forward+backward with a checkpoint every k blocks"


def add_arguments(p) -> None:
    p.add_argument("--layers", type=positive_int, default=16, help="Linear+ReLU blocks (default %(default)s)")
    p.add_argument("--width", type=positive_int, default=256, help="hidden width (default %(default)s)")
    p.add_argument("--batch", type=positive_int, default=1024, help="samples in the step (default %(default)s)")
    p.add_argument("--checkpoint-every", type=comma_list(non_negative_int), default=[0, 2, 4, 8],
                   help="k values, comma-separated; 0 = no checkpointing (default 0,2,4,8)")
    p.add_argument("--seed", type=int, default=0, help="weights and data seed (default %(default)s)")
    p.add_argument("--out", required=True, help="folder for checkpointing.json and one trace per k")


def main(args) -> int:
    from ..checkpointing import DEMO_CONFIG, measure_checkpointing
    from ..checkpointing_records import describe

    cfg = DEMO_CONFIG.replace(layers=args.layers, width=args.width, batch_per_rank=args.batch,
                              seed=args.seed)
    record = measure_checkpointing(cfg, checkpoint_every=args.checkpoint_every, out=args.out)
    print(describe(record))
    ks = ",".join(str(r.checkpoint_every) for r in record.rows)
    print(f"wrote {args.out}/checkpointing.json and trace-k{{{ks}}}.json (open in ui.perfetto.dev)")
    return 0

"""`dpviz checkpointing`: activation memory through one step, per checkpoint interval → checkpointing.json."""
from __future__ import annotations

from dpviz.core.arguments import comma_list, non_negative_int, positive_int

NAME = "checkpointing"
HELP = "measure activation memory over forward+backward with a checkpoint every k blocks"


def add_arguments(p) -> None:
    from dpviz.lessons.checkpointing.live import DEMO_CONFIG
    from dpviz.core.config import MODEL_DEFAULTS

    p.add_argument("--model", default="mlp",
                   help="mlp, gpt, cnn, or MODULE:FUNCTION returning a dpviz.Workload whose model has "
                        "`blocks` and a `head`; a segment is k blocks (default %(default)s)")
    d = DEMO_CONFIG
    sizes = "; ".join([f"mlp {d.layers}, {d.width}, {d.batch_per_rank}"] + [
        f"{m} {v['layers']}, {v['width']}, {v['batch_per_rank']}" for m, v in MODEL_DEFAULTS.items() if m != "mlp"])
    p.add_argument("--layers", type=positive_int, default=None,
                   help=f"blocks of a built-in model (default, then --width and --batch: {sizes})")
    p.add_argument("--width", type=positive_int, default=None,
                   help="hidden size: MLP features, GPT d_model, CNN channels")
    p.add_argument("--batch", type=positive_int, default=None, help="samples in the step")
    p.add_argument("--checkpoint-every", type=comma_list(non_negative_int), default=[0, 2, 4, 8],
                   help="k values, comma-separated; 0 = no checkpointing (default 0,2,4,8)")
    p.add_argument("--seed", type=int, default=0, help="weights and data seed (default %(default)s)")
    p.add_argument("--out", required=True, help="folder for checkpointing.json and one trace per k")


def main(args) -> int:
    from dpviz.lessons.checkpointing.live import DEMO_CONFIG, measure_checkpointing
    from dpviz.lessons.checkpointing.records import describe

    cfg = DEMO_CONFIG if args.model == "mlp" else DEMO_CONFIG.replace(model=args.model)
    sizes = dict(layers=args.layers, width=args.width, batch_per_rank=args.batch)
    cfg = cfg.replace(seed=args.seed, **{k: v for k, v in sizes.items() if v is not None})
    record = measure_checkpointing(cfg, checkpoint_every=args.checkpoint_every, out=args.out)
    print(describe(record))
    ks = ",".join(str(r.checkpoint_every) for r in record.rows)
    print(f"wrote {args.out}/checkpointing.json and trace-k{{{ks}}}.json (open in ui.perfetto.dev)")
    return 0

"""`dpviz run`: one live DDP run → record.json, per-rank traces, a merged trace."""
from __future__ import annotations

from pathlib import Path

from dpviz.analysis.overlap import describe
from dpviz.analysis.summary import write_summary
from dpviz.app.link_args import add_link_arguments, link_of
from dpviz.core.arguments import non_negative_int, positive_float, positive_int
from dpviz.core.config import DEVICES, MODEL_DEFAULTS, NO_SYNC_SCOPES, RunConfig
from dpviz.engine.ddp_run import run


def _cap(text: str) -> float | None:
    """A cap in MB, or 'default': DDP's own (25 MB, with a 1 MiB first bucket)."""
    return None if text == "default" else positive_float(text)

# The command line's cap, not DDP's 25 MB: the default MLP's ~1 MiB of gradients would fill one
# bucket, and one bucket cannot start before backward ends, so a first `--link` run would show no
# overlap. At 0.25 MB each of its four blocks is a bucket of its own.
CLI_CAP_MB = 0.25

NAME = "run"
HELP = "train a model (mlp, gpt, cnn or your own) with DDP on live ranks and record traces, buckets and checks"


def add_arguments(p) -> None:
    d = RunConfig()
    p.add_argument("--model", default=d.model,
                   help="mlp, gpt, cnn, or MODULE:FUNCTION: a function in a module importable from "
                        "the current folder or PYTHONPATH that returns a dpviz.Workload (default %(default)s)")
    p.add_argument("--ranks", type=positive_int, default=d.world_size, help="number of ranks (default %(default)s)")
    p.add_argument("--steps", type=positive_int, default=d.steps, help="optimizer steps (default %(default)s)")
    p.add_argument("--bucket-cap-mb", type=_cap, default=CLI_CAP_MB,
                   help="DDP bucket_cap_mb, or 'default' for DDP's own (25 MB, 1 MiB first bucket); "
                        "default %(default)s, so the default model's gradients split into buckets")
    p.add_argument("--accum-steps", type=positive_int, default=d.accum_steps, help="micro-batches per step, no_sync on all but the last")
    p.add_argument("--no-sync", choices=NO_SYNC_SCOPES, default=d.no_sync,
                   help="what no_sync() wraps on the first K-1 micro-steps (default %(default)s)")
    p.add_argument("--no-loss-scaling", action="store_true", help="do not divide the loss by --accum-steps")
    p.add_argument("--checkpoint-every", type=non_negative_int, default=d.checkpoint_every,
                   help="recompute activations in segments of k blocks (0 = none)")
    sizes = "; ".join(f"{m} {v['layers']}, {v['width']}, {v['batch_per_rank']}" for m, v in MODEL_DEFAULTS.items())
    p.add_argument("--layers", type=positive_int, default=None,
                   help=f"blocks of a built-in model (default, then --width and --batch: {sizes})")
    p.add_argument("--width", type=positive_int, default=None,
                   help="hidden size of a built-in model: MLP features, GPT d_model, CNN channels")
    p.add_argument("--batch", type=positive_int, default=None, help="samples per rank per micro-step")
    p.add_argument("--backend", default=d.backend, help="gloo (CPU) or nccl (one GPU per rank)")
    p.add_argument("--device", choices=DEVICES, default=None,
                   help="where ranks compute (default: the backend's own, gloo on cpu, nccl on cuda); "
                        "gloo on cuda deals the ranks round-robin over the GPUs")
    p.add_argument("--timeout", type=positive_float, default=d.timeout_s, help="seconds before a silent rank is an error")
    p.add_argument("--slow-rank", type=non_negative_int, default=None,
                   help="make this rank a straggler: it sleeps --delay-ms in every forward")
    p.add_argument("--delay-ms", type=positive_float, default=0.0,
                   help="how long the --slow-rank sleeps per forward (ms)")
    add_link_arguments(p)
    p.add_argument("--out", required=True, help="folder for record.json and the traces")


def main(args) -> int:
    cfg = RunConfig(model=args.model, world_size=args.ranks, steps=args.steps, bucket_cap_mb=args.bucket_cap_mb,
                    accum_steps=args.accum_steps, no_sync=args.no_sync,
                    scale_loss=not args.no_loss_scaling, checkpoint_every=args.checkpoint_every,
                    layers=args.layers, width=args.width,
                    batch_per_rank=args.batch, backend=args.backend, device=args.device, timeout_s=args.timeout,
                    slow_rank=args.slow_rank, delay_ms=args.delay_ms, link=link_of(args))
    record = run(cfg, out=args.out)
    write_summary(record, Path(args.out) / "summary.json")
    print(describe(record))
    print(f"wrote {args.out}/record.json, summary.json, trace-rank{{0..{record.world_size - 1}}}.json, "
          "trace-merged.json")
    return 0

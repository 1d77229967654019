"""`dpviz accumulation`: sweep K live and check the accumulated gradient → accumulation.json."""
from __future__ import annotations

from pathlib import Path

from dpviz.app.link_args import add_link_arguments, link_of
from dpviz.core.arguments import comma_list, positive_float, positive_int
from dpviz.core.config import writable_dir
from dpviz.core.record import save
from dpviz.engine.launch import Cluster
from dpviz.lessons.accumulation.live import (
    DEMO_CONFIG, check_accum_values, check_gradients, sweep_accumulation,
)
from dpviz.lessons.accumulation.records import describe_accumulation_sweep, with_gradients

NAME = "accumulation"
HELP = "gradient accumulation with no_sync: sweep K on live ranks, check gradients vs one large batch"


def add_arguments(p) -> None:
    d = DEMO_CONFIG
    p.add_argument("--ranks", type=positive_int, default=d.world_size, help="number of ranks (default %(default)s)")
    p.add_argument("--k", type=comma_list(positive_int), default=[1, 2, 4, 8],
                   help="micro-steps per optimizer step to sweep, e.g. 1,2,4,8 (the default)")
    p.add_argument("--steps", type=positive_int, default=d.steps, help="optimizer steps per K; medians skip step 0")
    p.add_argument("--batch", type=positive_int, default=d.batch_per_rank, help="samples per rank per micro-step")
    p.add_argument("--bucket-cap-mb", type=positive_float, default=d.bucket_cap_mb, help="DDP bucket_cap_mb (default %(default)s)")
    add_link_arguments(p)
    p.add_argument("--out", required=True, help="folder for accumulation.json")


def main(args) -> int:
    cfg = DEMO_CONFIG.replace(world_size=args.ranks, steps=args.steps, batch_per_rank=args.batch,
                              bucket_cap_mb=args.bucket_cap_mb, link=link_of(args))
    ks = check_accum_values(args.k)
    out = writable_dir(args.out)
    with Cluster(cfg.world_size, cfg.backend, cfg.timeout_s) as cluster:
        record = sweep_accumulation(cfg, cluster=cluster, ks=ks)
        checks = [check_gradients(cfg.replace(accum_steps=k, scale_loss=scaled), cluster=cluster)
                  for k in ks for scaled in (True, False)]
    record = with_gradients(record, checks)
    path = save(record, Path(out) / "accumulation.json")
    print(describe_accumulation_sweep(record))
    print(f"wrote {path}")
    return 0

"""dpviz's DDP workload under `torchrun`: one node or many, gloo or NCCL, same code path.

torchrun starts the processes and sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT; this module joins with `env://` rendezvous and runs the very
rank function `dpviz.run` uses (`ddp_run.train_rank`). Each rank then sends its profiler
trace to rank 0 over the process group (no shared file system needed across nodes), and
rank 0 writes the per-rank traces, the merged trace and record.json into --out.

One node, CPU, gloo, every listening socket on 127.0.0.1 (tested by tests/test_torchrun.py):
    dpviz torchrun --nproc-per-node 2 -- --backend gloo --out runs/local
That is torchrun itself, started by `launch_on_loopback`: plain `torchrun --standalone` runs
the same job, but its rendezvous stores listen on every network interface (torch's store
server binds the wildcard address whatever host it is given), so dpviz hosts the store on
loopback and torchrun's agent and ranks join it as clients.

Two nodes with 8 GPUs each, NCCL (NOT tested here: no GPUs), run on every node with its
own --node_rank; HOST0 is node 0's address, reachable from node 1:
    torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0 \\
        --rdzv_backend=c10d --rdzv_endpoint=HOST0:29500 --rdzv_id=dpviz-1 \\
        -m dpviz.engine.torchrun_entry --backend nccl --out runs/2x8
The record and all 16 traces land in --out on node 0. Two nodes of 2 CPU ranks on ONE host
(tested: two agents with --nnodes 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT
--node-rank 0 / 1) are the same command on gloo. Each trace carries its node and local rank
(top-level `dpvizNode`), so records and reports label ranks node:local.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from dpviz.analysis.summary import write_summary
from dpviz.analysis.trace_files import NODE_FIELD, node_label
from dpviz.core.arguments import positive_float, positive_int
from dpviz.core.config import BACKENDS, RunConfig, validate, writable_dir
from dpviz.core.record import save
from dpviz.engine.launch import RankContext

ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
STORE_PORT_VAR = "DPVIZ_STORE_PORT"   # set by launch_on_loopback: the ranks join its store


def launch_on_loopback(nproc_per_node: int, entry_args: list[str], *, timeout_s: float = 600.0) -> int:
    """Run `torchrun` on this machine with nothing listening beyond loopback; its exit code.

    The store is made here on 127.0.0.1 (`launch.loopback_store`); torchrun's c10d rendezvous
    joins it as a client (`is_host=false`), its agent shares no store of its own with the ranks
    (TORCH_DISABLE_SHARE_RDZV_TCP_STORE), and the ranks join the same store through
    DPVIZ_STORE_PORT instead of `env://`, whose rank 0 would host one on every interface.
    """
    import subprocess

    import torch.distributed as dist

    from dpviz.engine.launch import LOOPBACK, loopback_store

    store = loopback_store(dist, timeout_s)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
           f"--nproc-per-node={nproc_per_node}", "--rdzv-backend=c10d",
           f"--rdzv-endpoint={LOOPBACK}:{store.port}", "--rdzv-conf=is_host=false",
           f"--local-addr={LOOPBACK}", "-m", "dpviz.engine.torchrun_entry", *entry_args]
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "GLOO_SOCKET_IFNAME": "lo",
           STORE_PORT_VAR: str(store.port)}
    try:
        return subprocess.run(cmd, env=env, timeout=timeout_s).returncode
    finally:
        del store


def _init_process_group(dist, cfg: RunConfig, env: dict[str, int]) -> None:
    """Join the loopback store `launch_on_loopback` hosts, or torchrun's own (`env://`)."""
    timeout = timedelta(seconds=cfg.timeout_s)
    port = os.environ.get(STORE_PORT_VAR)
    if port is None:
        dist.init_process_group(cfg.backend, init_method="env://", timeout=timeout)
        return
    from dpviz.engine.launch import LOOPBACK

    store = dist.PrefixStore(os.environ.get("TORCHELASTIC_RUN_ID", "dpviz"),
                             dist.TCPStore(LOOPBACK, int(port), is_master=False, timeout=timeout))
    dist.init_process_group(cfg.backend, store=store, rank=env["rank"],
                            world_size=env["world_size"], timeout=timeout)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = RunConfig()
    p = argparse.ArgumentParser(prog="python -m dpviz.engine.torchrun_entry",
                                description="dpviz's DDP workload on ranks started by torchrun")
    p.add_argument("--backend", choices=BACKENDS, default=d.backend, help="gloo (CPU) or nccl (one GPU per rank)")
    p.add_argument("--out", required=True, help="folder (on rank 0's node) for record.json and traces")
    p.add_argument("--steps", type=positive_int, default=d.steps)
    p.add_argument("--layers", type=positive_int, default=d.layers)
    p.add_argument("--width", type=positive_int, default=d.width)
    p.add_argument("--batch", type=positive_int, default=d.batch_per_rank, help="samples per rank per step")
    p.add_argument("--bucket-cap-mb", type=positive_float, default=d.bucket_cap_mb)
    p.add_argument("--timeout", type=positive_float, default=d.timeout_s, help="seconds per collective")
    return p.parse_args(argv)


def rank_env(environ=os.environ) -> dict[str, int]:
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE as torchrun set them."""
    missing = [v for v in ENV_VARS if v not in environ]
    if missing:
        raise ValueError(f"{', '.join(missing)} not set: start this module with torchrun, e.g. "
                         "torchrun --standalone --nproc_per_node=2 -m dpviz.engine.torchrun_entry --out DIR")
    return {v.lower(): int(environ[v]) for v in ENV_VARS}


def config_for(args: argparse.Namespace, world_size: int, local_world_size: int) -> RunConfig:
    """The run's config. Validation is per machine (local ranks vs this node's cores or GPUs):
    a 2×8-GPU job is valid although no single node has 16 GPUs."""
    local = RunConfig(world_size=local_world_size, steps=args.steps, layers=args.layers,
                      width=args.width, batch_per_rank=args.batch, bucket_cap_mb=args.bucket_cap_mb,
                      backend=args.backend, timeout_s=args.timeout)
    return dataclasses.replace(validate(local), world_size=world_size)


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    from dpviz.engine.assemble import assemble_run
    from dpviz.engine.ddp_run import train_rank
    from dpviz.analysis.overlap import describe

    args = parse_args(argv)
    env = rank_env()
    cfg = config_for(args, env["world_size"], env["local_world_size"])
    out_dir = writable_dir(args.out) if env["rank"] == 0 else None
    device = "cpu"
    if cfg.backend == "nccl":
        torch.cuda.set_device(env["local_rank"])
        device = f"cuda:{env['local_rank']}"
    else:
        torch.set_num_threads(1)        # CPU ranks share the node's cores
    _init_process_group(dist, cfg, env)
    try:
        with tempfile.TemporaryDirectory(prefix="dpviz-torchrun-") as tmp:
            ctx = RankContext(env["rank"], env["world_size"], cfg.backend, device, tmp)
            result = train_rank(ctx, cfg, export_trace=True)   # the trace files are what torchrun users keep
            trace = json.loads(Path(result.pop("trace_path")).read_text())
            # which node and local rank this is (torchrun's GROUP_RANK is the node's rank),
            # kept in the trace file so a later load_trace labels the rank as node:local
            result["node"] = trace[NODE_FIELD] = {"node": int(os.environ.get("GROUP_RANK", 0)),
                                                  "local_rank": env["local_rank"]}
            result["trace_text"] = json.dumps(trace)
            gathered = [None] * cfg.world_size if ctx.rank == 0 else None
            dist.gather_object(result, gathered, dst=0)   # traces travel to rank 0's node
            if ctx.rank == 0:
                labels = {r: node_label(r, res["node"]) for r, res in enumerate(gathered)}
                for rank, res in enumerate(gathered):
                    res["trace_path"] = str(Path(tmp) / f"gathered-rank{rank}.json")
                    Path(res["trace_path"]).write_text(res.pop("trace_text"))
                record = assemble_run(cfg, gathered, out_dir)
                record = dataclasses.replace(record, rank_labels=labels)
                save(record, out_dir / "record.json")
                write_summary(record, out_dir / "summary.json")
                print(describe(record))
                print(f"wrote {out_dir}/record.json, summary.json and "
                      f"trace-rank{{0..{cfg.world_size - 1}}}.json (ranks: {', '.join(labels.values())})")
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from dpviz.engine.rank_stderr import filter_own_stderr

    filter_own_stderr()     # torchrun passes our stderr on as is: drop the profiler's USDT lines
    try:
        sys.exit(main())
    except ValueError as err:
        print(f"dpviz.engine.torchrun_entry: error: {err}", file=sys.stderr)
        sys.exit(2)

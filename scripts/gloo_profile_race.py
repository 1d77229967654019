"""Does a profile stopped as a DDP step returns hold every bucket's gloo all-reduce?

Plain torch, no dpviz: 2 gloo ranks on 127.0.0.1, DDP over 8 Linear layers of shrinking widths
with 0.2 MB buckets (each bucket of another size) and a comm hook that all-reduces
asynchronously (as dpviz's does), one profile per step, stopped as the step returns. Prints,
per rank, how many profiles held fewer `gloo:all_reduce` events than `c10d::allreduce_`
launches, and how many held them all but started in another order than DDP launched them
(gloo runs two worker threads; told apart by their recorded sizes). gloo's worker thread completes an
all-reduce's future before it records the end of its profiler event, so a profiler stopped at
once can lose the last bucket's event; `--wait` waits on each all-reduce's Work first (what
`dpviz.engine.ddp_run.BucketLog.settle` does), `--sleep-ms` sleeps before the stop instead.

Usage: python scripts/gloo_profile_race.py [--steps 300] [--wait] [--sleep-ms 0]
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function


def rank(r: int, world: int, port: int, args, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=r, world_size=world)
    torch.manual_seed(0)
    widths = [256, 250, 244, 238, 232, 226, 220, 214, 208]
    model = DDP(torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])]),
                bucket_cap_mb=0.2)
    works, launched = [], []

    def hook(state, bucket):
        buf = bucket.buffer()
        launched.append(buf.numel())
        with record_function(f"hook#{bucket.index()}"):
            buf.div_(world)
            work = dist.all_reduce(buf, async_op=True)
        works.append(work)
        return work.get_future().then(lambda f: f.value()[0])

    model.register_comm_hook(None, hook)
    x = torch.randn(32, 256)
    model(x).sum().backward()   # the first step: DDP rebuilds its buckets after it
    short = reordered = 0
    for _ in range(args.steps):
        works.clear()
        launched.clear()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            model(x).sum().backward()
            if args.wait:
                for work in works:
                    work.wait()
            if args.sleep_ms:
                time.sleep(args.sleep_ms / 1e3)
        started = [shapes[0][0] for _, shapes in sorted(
            (e.time_range.start, e.input_shapes) for e in prof.events() if e.name == "gloo:all_reduce")]
        short += len(started) < len(launched)
        reordered += len(started) == len(launched) and started != launched
    out.put((r, len(launched), short, reordered))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--wait", action="store_true", help="wait on each all-reduce's Work before the stop")
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=29531)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=rank, args=(r, 2, args.port, args, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted(out.get() for _ in procs)
    for p in procs:
        p.join()
    print(f"torch {torch.__version__}, {args.steps} profiled steps a rank, wait={args.wait}, "
          f"sleep {args.sleep_ms} ms:")
    for r, launched, short, reordered in results:
        print(f"  rank {r}: {launched} all-reduces launched a step; {short} of {args.steps} profiles "
              f"short, {reordered} with every all-reduce but started out of launch order")


if __name__ == "__main__":
    main()

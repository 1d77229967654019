"""How much slower the what-if check's training step runs right after a wait, by the wait's
length and by how the thread waits (sleeping, or spinning in Python on the same core).

One process, one intra-op thread (as a rank runs), the check's MLP (`CHECK_CONFIG`): each
repeat times forward + backward + SGD step right after a wait of each length and kind, in
turn, so load drift hits every column alike. Prints the medians and each against no wait.
A rank of the slow-link runs waits like this for the link before its optimizer.
Usage: python benchmarks/after_a_wait.py [--repeats 30] [--waits-ms 0,10,20,50,100,200]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from dpviz.engine.workloads import build_mlp, loss_fn, mlp_batch
from dpviz.lessons.what_if.live import CHECK_CONFIG


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--waits-ms", default="0,10,20,50,100,200")
    args = parser.parse_args()
    waits = [float(w) for w in args.waits_ms.split(",")]
    torch.set_num_threads(1)
    cfg = CHECK_CONFIG.replace(world_size=1)
    model = build_mlp(cfg)
    x, y = mlp_batch(cfg)(0, 0, cfg.batch_per_rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step_ms() -> float:
        t0 = time.perf_counter()
        loss_fn(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        return (time.perf_counter() - t0) * 1e3

    for _ in range(20):
        step_ms()
    times: dict[tuple[str, float], list[float]] = {}
    for _ in range(args.repeats):
        for wait in waits:
            for kind, how in (("sleep", time.sleep), ("spin", spin)):
                if wait:
                    how(wait / 1e3)
                times.setdefault((kind, wait), []).append(step_ms())
    base = statistics.median(times[("sleep", 0.0)] + times[("spin", 0.0)]) if 0.0 in waits else None
    print(f"load average before/after: {os.getloadavg()}; {cfg.layers} x Linear({cfg.width}), "
          f"batch {cfg.batch_per_rank}, 1 thread; medians of {args.repeats}")
    for wait in waits:
        row = [f"wait {wait:5.0f} ms"]
        for kind in ("sleep", "spin"):
            ms = statistics.median(times[(kind, wait)])
            row.append(f"{kind} {ms:6.2f} ms" + (f" ({ms / base:.2f}x no wait)" if base else ""))
        print("   ".join(row))


if __name__ == "__main__":
    main()

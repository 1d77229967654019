"""Count the all-reduce spans of live runs numbered with another bucket's size.

DDP's comm hook notes each bucket's index and bytes; a run that records shapes gives each
all-reduce span its bytes and a bucket number from the trace. Where gloo's two worker threads
start two buckets' all-reduces out of DDP's launch order, a numbering by start order gives
the span another bucket's number (and so another bucket's size). Runs the GPT at a small cap
(many buckets a step) `--runs` times on 2 warm gloo ranks and prints how many spans disagree.
Usage: python scripts/bucket_numbering_check.py [--runs 300] [--bucket-cap-mb 0.05]
"""
from __future__ import annotations

import argparse
import time

from dpviz import RunConfig, run
from dpviz.engine.launch import using_cluster


def misnumbered(record) -> tuple[int, int]:
    """(spans whose bytes differ from their bucket's note, spans with a note) of one record
    run with K = 1 (one micro-step a step)."""
    notes = {(b.rank, b.step, b.index): b.bytes for b in record.buckets}
    bad = total = 0
    for s in record.spans:
        if s.kind == "allreduce" and (s.rank, s.step, s.bucket) in notes:
            total += 1
            bad += s.bytes != notes[(s.rank, s.step, s.bucket)]
    return bad, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--bucket-cap-mb", type=float, default=0.05)
    args = parser.parse_args()
    bad = total = 0
    t0 = time.perf_counter()
    with using_cluster(None, 2, "gloo", 60) as ranks:
        for i in range(args.runs):
            cfg = RunConfig(model="gpt", steps=3, checks=False, seed=i % 5, bucket_cap_mb=args.bucket_cap_mb)
            b, t = misnumbered(run(cfg, cluster=ranks))
            bad, total = bad + b, total + t
    print(f"{args.runs} runs: {bad} of {total} all-reduce spans numbered with another bucket's size "
          f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()

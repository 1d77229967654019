"""The timing lessons with the emulated link on and off, measured side by side in one run.

For each link (default: sized = dpviz.size_link's link for each workload, as notebooks 01 and 03
use; classroom; off = raw loopback), caps taken round-robin `--repeats` times, then K taken
round-robin; prints medians, the spread (IQR), and the verdicts dpviz prints in the notebooks, plus
the machine's load average so the numbers carry their conditions.
Usage: python benchmarks/link_physics.py [--links sized,classroom,off] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics

from dpviz import Cluster, run
from dpviz.core.bucket_layout import ONE_BUCKET_CAP_MB
from dpviz.core.link import describe_link
from dpviz.engine.link_sizing import size_link
from dpviz.lessons.accumulation import live as accumulation
from dpviz.lessons.accumulation.records import describe_accumulation_sweep
from dpviz.lessons.buckets.live import sweep_config
from dpviz.lessons.buckets.records import (
    BucketSweep, cap_row, describe_overlap, format_sweep, link_predictions,
)

CAPS = (0.25, 1.0, 4.0, ONE_BUCKET_CAP_MB)


def with_link(cfg, link: str, cluster):
    """`cfg` on the named link; "sized" measures cfg's backward first (dpviz.size_link)."""
    return cfg.replace(link=size_link(cfg, cluster=cluster) if link == "sized" else link)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", default="sized,classroom,off")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    with Cluster(2) as cluster:
        for link in args.links.split(","):
            cfg = with_link(sweep_config(steps=5), link, cluster)
            print(f"\n=== {describe_link(cfg.link)}")
            run(cfg.replace(steps=2), cluster=cluster)
            runs = {cap: [] for cap in CAPS}
            for _ in range(args.repeats):
                for cap in CAPS:
                    runs[cap].append(run(cfg.replace(bucket_cap_mb=cap), cluster=cluster))
            rows = {cap: cap_row(*rs) for cap, rs in runs.items()}
            print(describe_overlap(rows[1.0], rows[ONE_BUCKET_CAP_MB]))
            print(format_sweep(BucketSweep(config={**cfg.to_dict(), "bucket_cap_mb": None}, world_size=2,
                                           rows=tuple(rows.values()))))
            if cfg.link is not None:
                errors = [abs(p.link_ms / p.predicted_ms - 1) for rs in runs.values() for r in rs
                          for p in link_predictions(r)]
                print(f"alpha-beta vs link spans: median error {statistics.median(errors):.1%}, "
                      f"worst {max(errors):.1%} over {len(errors)} transfers")
            acc = accumulation.sweep_accumulation(with_link(accumulation.DEMO_CONFIG, link, cluster), cluster=cluster,
                                                  ks=(1, 2, 4, 8), repeats=args.repeats)
            print(describe_accumulation_sweep(acc))
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

"""Does notebook 03's overlap lesson hold from one fresh run to the next?

Five times, as a fresh Run All would: start two ranks, size the emulated link as 03's first cell
does (`dpviz.size_link` on 1 MiB buckets, five runs a pass), then 03 §3 (`overlap_contrast`:
1 MiB buckets and one bucket, five runs each, taken in turn; `--repeats` changes both). Prints, per run, the link, the backward sized to and
measured, and the share of one bucket's exposed communication the buckets hid; then whether the
shares lie within ±10 points of each other and whether buckets exposed less communication than
one bucket every time (issue 30's bar for "the lesson holds run to run").

    PYTHONPATH=. python benchmarks/overlap_run_to_run.py [--runs 5] [--repeats 5]

Run it on a quiet machine and note `uptime` beside the result: on 2 shared cores under other
work, every backward stretches and the spread with it.
"""
from __future__ import annotations

import argparse
import os
import time

import dpviz
from dpviz.core.link import sizing_factor
from dpviz.engine.link_sizing import run_backward_ms, size_link
from dpviz.lessons.buckets.live import overlap_contrast, sweep_config
from dpviz.lessons.buckets.records import cap_row, overlap_share

BAR_POINTS = 10.0   # shares within ±10 points of each other: max − min ≤ 20 points


def one_fresh_run(repeats: int) -> dict:
    """03's first cell and §3 on ranks started for this run, `repeats` runs in each."""
    with dpviz.Cluster(2) as cluster:
        workload = sweep_config(steps=4, bucket_cap_mb=1.0)
        cfg = workload.replace(link=size_link(workload, cluster=cluster, repeats=repeats))
        bucketed, one = overlap_contrast(cfg, cluster=cluster, cap=1.0, repeats=repeats)
    b, o = cap_row(*bucketed), cap_row(*one)
    measured = run_backward_ms(*bucketed)
    return dict(link=cfg.link, sized_to=cfg.link.sized_to_ms, measured=measured,
                factor=sizing_factor(cfg.link, measured), share=overlap_share(b, o),
                exposed=(b.exposed_comm_ms, o.exposed_comm_ms))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5, help="runs per sizing pass and per §3 arm, as notebook 03")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores")
    rows = []
    for i in range(args.runs):
        start = time.perf_counter()
        r = one_fresh_run(args.repeats)
        rows.append(r)
        print(f"run {i + 1}: {r['link'].gbps:g} Gb/s, α {r['link'].latency_us:g} µs; backward sized to "
              f"{r['sized_to']:.1f} ms, §3 measured {r['measured']:.1f} ms ({r['factor']:.2f}×); exposed "
              f"{r['exposed'][0]:.1f} ms (1 MiB) vs {r['exposed'][1]:.1f} ms (one bucket): overlap hid "
              f"{100 * r['share']:.0f} % ({time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.1f})")
    shares = [100 * r["share"] for r in rows]
    spread = max(shares) - min(shares)
    beat = sum(r["exposed"][0] < r["exposed"][1] for r in rows)
    print(f"overlap shares {', '.join(f'{s:.0f}' for s in shares)} %: spread {spread:.0f} points "
          f"({'within' if spread <= 2 * BAR_POINTS else 'NOT within'} ±{BAR_POINTS:g})")
    print(f"buckets exposed less communication than one bucket in {beat} of {len(rows)} runs")
    factors = ', '.join(f"{r['factor']:.2f}" for r in rows)
    print(f"sizing factors (measured ÷ sized): {factors}")


if __name__ == "__main__":
    main()

"""One training step by layer: backward / forward and weight-gradient (W) / input-gradient (B).

Profiled on one rank with one intra-op thread (dpviz.lessons.anatomy.live), median of --repeats steps, at a
few batch sizes; FLOPs are equal for forward, B and W of a layer, so the ratios show how far
CPU time departs from the FLOP count (B and W read their operands in different layouts).
Usage: python benchmarks/step_anatomy.py [--width 512] [--layers 4] [--repeats 9]
"""
from __future__ import annotations

import argparse

from dpviz import Cluster, RunConfig
from dpviz.lessons.anatomy.live import measure_anatomy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    print(f"MLP {args.layers}x{args.width}, one rank, medians of {args.repeats} profiled steps")
    print(f"{'batch':>6} {'bwd/fwd':>8} {'W/B (hidden)':>13} {'W share of bwd':>15} {'other/bwd':>10}")
    with Cluster(1) as cluster:
        for batch in (32, 96, 384):
            rec = measure_anatomy(RunConfig(layers=args.layers, width=args.width, batch_per_rank=batch),
                                  cluster=cluster, repeats=args.repeats)
            hidden = rec.layers[1:-1]
            fwd = sum(l.forward_ms for l in rec.layers)
            bwd = sum(l.backward_ms for l in rec.layers)
            b = sum(l.input_grad_ms for l in hidden)
            w = sum(l.weight_grad_ms for l in hidden)
            other = sum(l.other_ms for l in rec.layers)
            print(f"{batch:>6} {bwd / fwd:8.2f} {w / b:13.2f} "
                  f"{w / sum(l.backward_ms for l in hidden):15.0%} {other / bwd:10.0%}")


if __name__ == "__main__":
    main()

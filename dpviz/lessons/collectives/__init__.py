"""Collectives: all-reduce algorithms (ring, tree, naive, the unchunked ring) as schedules,
their numpy model, the records of live runs and the bandwidth model. No workload: a
collective moves tensors of a given size whatever model is trained, so nothing here takes one.

This package imports no torch and loads no rank code, so records load and render without it.
The live verbs run ranks and live beside it: `execute.record_collective`,
`primitives.record_primitives`, `timing.bench_collectives` (also on the `dpviz` facade).
"""
from dpviz.lessons.collectives.algorithms import ALGORITHMS, build
from dpviz.lessons.collectives.bandwidth import (
    AlphaBeta, BenchRecord, bus_factor, fit_all, fit_alpha_beta,
)
from dpviz.lessons.collectives.model import demo_inputs, model_collective
from dpviz.lessons.collectives.record import CollectiveRecord, PrimitivesRecord, describe_collective
from dpviz.lessons.collectives.schedule import holds_per_step, simulate

__all__ = ["ALGORITHMS", "AlphaBeta", "BenchRecord", "CollectiveRecord", "PrimitivesRecord",
           "build", "bus_factor", "demo_inputs", "describe_collective", "fit_alpha_beta", "fit_all",
           "holds_per_step", "model_collective", "simulate"]

"""Collectives on live ranks: torch's primitives, and all-reduce algorithms (ring, tree,
naive, the unchunked ring) executed step by step with send/recv, modelled in numpy and timed.

No torch at import: records load and render without it.
"""
from .algorithms import ALGORITHMS, build
from .bandwidth import AlphaBeta, BenchRecord, bus_factor, fit_alpha_beta, fit_all
from .execute import demo_inputs, model_collective, record_collective
from .primitives import PRIMITIVES, record_primitives
from .record import CollectiveRecord, PrimitivesRecord, describe_collective
from .schedule import holds_per_step, simulate
from .timing import bench_collectives

__all__ = ["ALGORITHMS", "PRIMITIVES", "AlphaBeta", "BenchRecord", "CollectiveRecord",
           "PrimitivesRecord", "bench_collectives", "build", "bus_factor", "demo_inputs",
           "describe_collective", "fit_alpha_beta", "fit_all", "holds_per_step",
           "model_collective", "record_collective", "record_primitives", "simulate"]

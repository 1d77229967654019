"""Collectives on live ranks: torch's primitives, and all-reduce algorithms (ring, tree,
naive, the unchunked ring) executed step by step with send/recv, modelled in numpy and timed.

No torch at import: records load and render without it.
"""
from .algorithms import ALGORITHMS, build
from .execute import demo_inputs, model_collective, record_collective
from .record import CollectiveRecord, PrimitivesRecord
from .schedule import holds_per_step

__all__ = ["ALGORITHMS", "CollectiveRecord", "PrimitivesRecord", "build", "demo_inputs",
           "holds_per_step", "model_collective", "record_collective"]

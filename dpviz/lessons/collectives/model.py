"""The numpy model of an all-reduce: what a live record of the same algorithm must equal.

No torch: the model renders and checks on a machine with no ranks.
"""
from __future__ import annotations

import numpy as np

from dpviz.lessons.collectives.algorithms import build
from dpviz.lessons.collectives.record import CollectiveRecord
from dpviz.lessons.collectives.schedule import simulate


def demo_inputs(world_size: int, elements: int, seed: int = 0) -> np.ndarray:
    """(ranks, elements) float32 of small integers 0..9: sums are exact in any order, so a
    live run, the model and dist.all_reduce agree bit for bit and the values read well."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 10, size=(world_size, elements)).astype(np.float32)


def model_collective(algorithm: str, inputs: np.ndarray) -> CollectiveRecord:
    """The same algorithm on the same inputs in numpy: what a live record must equal."""
    inputs = np.asarray(inputs, dtype=np.float32)
    return simulate(build(algorithm, inputs.shape[0], inputs.shape[1]), inputs)

"""How far two float32 computations of the same mathematics may differ: rounding, and nothing more.

Data parallelism changes the order in which numbers are added (each rank sums its own shard,
the all-reduce then sums the ranks; one process sums the whole batch at once), and so does the
CPU: ATen picks its kernels at start-up (`default`, `avx2`, `avx512`: different vector widths,
different partial sums; `ATEN_CPU_CAPABILITY` forces one). Float addition is not associative,
so results that are equal in exact arithmetic differ in their last bits, by an amount that
depends on the machine. Each function here bounds that amount from the arithmetic:

    a sum of n terms computed in any order is within (n − 1)·u·Σ|x| of the exact sum
    (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 4.4; u = ε/2),

so two orders of the same n terms differ by at most n·ε·Σ|x|, with ε = 2⁻²³ for float32.
The bound needs Σ|x| of each sum, which no run records; the functions below scale by the
largest value involved instead (the largest parameter, gradient entry or output). That assumes
the terms of a sum are not much larger than the values sums produce — true of these small
workloads, and covered by the worst case n·ε, which supposes every rounding goes the same way:
the differences the tests measure sit orders of magnitude below these bounds.

Where a difference is exactly 0 by construction (every rank receives the same all-reduce
result; integer-valued sums; one process against itself with the same kernels) a check
compares with `==` instead, and says so.
"""
from __future__ import annotations

from typing import Iterable

from dpviz.core.config import RunConfig

EPS32 = 2.0 ** -23          # float32 machine epsilon: the gap between 1.0 and the next float


def sum_order_bound(terms: int, magnitude: float) -> float:
    """Largest difference between two float32 sums of the same `terms` numbers added in
    different orders, when their absolute values add up to at most `magnitude`."""
    return terms * EPS32 * magnitude


def mlp_sums(cfg: RunConfig, batch: int | None = None) -> int:
    """Length of the longest chain of additions behind one parameter's update in the MLP
    workload: a dot product of `width` terms per Linear, forward and backward through the
    `layers` blocks and the head, then the weight gradient's sum over the batch (all ranks'
    samples, every micro-step). Any of them may be re-ordered by sharding or by the kernels."""
    batch = cfg.world_size * cfg.batch_per_rank * cfg.accum_steps if batch is None else batch
    return 2 * (cfg.layers + 1) * cfg.width + batch


def network_sums(fans: Iterable[int], positions: int, samples: int) -> int:
    """`mlp_sums` for any network: the chain behind one gradient entry passes each layer's
    dot product forward (fan-in) and backward (fan-out) — `fans` holds fan-in + fan-out per
    parameterised layer, and a normalisation's mean over its features — plus, per layer, at
    most one parameter-free reduction over a sample's `positions` (attention over tokens),
    then the weight gradient's sum over every position (token, pixel) of every sample in the
    step (a BatchNorm's batch mean is no longer)."""
    fans = list(fans)
    return sum(fans) + len(fans) * positions + samples * positions


def update_bound(sums: int, max_update: float, param_max: float, steps: int) -> float:
    """Largest rounding difference between two SGD trajectories after `steps`, scaled by the
    gradient rather than the parameters (tighter than `sgd_bound` where parameters such as a
    norm's scale of 1.0 dwarf the steps taken).

    Each step sets θ ← θ − lr·g. Re-ordered sums change g by at most `gradient_bound`'s
    `sum_order_bound(sums, grad_max)`, so lr·g by `sum_order_bound(sums, lr·grad_max)`, where
    lr·grad_max is the largest single update one process made (`max_update`); the update's
    own rounding adds one ulp of θ, ε·`param_max`. Steps add up, as in `sgd_bound`.
    """
    return steps * (sum_order_bound(sums, max_update) + EPS32 * param_max)


def sgd_bound(cfg: RunConfig, param_max: float, steps: int | None = None,
              sums: int | None = None) -> float:
    """Largest rounding difference between two SGD trajectories after `steps`, for a chain
    of `sums` additions per gradient entry (default: the MLP's, `mlp_sums(cfg)`).

    Each step sets θ ← θ − lr·g. Re-ordered sums change g by at most
    `sum_order_bound(sums, Σ|terms|)`; lr times the absolute gradient terms stays below
    the parameters' own size here (one SGD step moves a weight by less than the weight), so a
    step adds at most `sum_order_bound(sums, param_max)`, the update's own rounding
    (one ulp of θ) included. Steps add up; at these learning rates a difference is not
    amplified by later steps.
    """
    steps = cfg.steps if steps is None else steps
    return steps * sum_order_bound(mlp_sums(cfg) if sums is None else sums, param_max)


def gradient_bound(cfg: RunConfig, grad_max: float) -> float:
    """Rounding bound on one gradient entry of the MLP: its chain of `mlp_sums(cfg)` additions,
    scaled by the largest gradient entry (the terms of one sum are no larger than that)."""
    return sum_order_bound(mlp_sums(cfg), grad_max)


def relative_bound(cfg: RunConfig) -> float:
    """The same as a fraction: how far a ratio of two re-ordered results (a gradient's norm
    over the reference's) may stray from its exact value."""
    return sum_order_bound(mlp_sums(cfg), 1.0)


def describe_difference(diff: float, bound: float | None = None, exact_because: str = "") -> str:
    """A difference as a reader should take it, printed beside the number.

    `exact_because` names why it is 0 by construction (then any other value is a bug);
    otherwise 0 means bit-identical on this machine only, and a non-zero value is float32
    rounding if within the derived `bound`."""
    if exact_because:
        return f"{diff:.1e} (" + ("exact by construction: " if diff == 0 else "NOT 0, though ") \
            + f"{exact_because})"
    if diff == 0:
        return "0 (bit-identical on this machine; another CPU may differ by rounding)"
    if bound is None:
        return f"{diff:.1e}"
    verdict = "float32 rounding" if diff <= bound else "MORE than float32 rounding explains"
    return f"{diff:.1e} ({verdict}: bound {bound:.0e})"


def max_abs(tensors: Iterable) -> float:
    """The largest |entry| over some tensors (the magnitude a bound is scaled by)."""
    return max(float(t.abs().max()) for t in tensors)

"""What ranks average, and when — the records and their pure analysis (no torch).

The four experiments of `averaging.py` (the worked example, uneven shards, parameter vs
gradient averaging, picotron #39's weight-averaging hook) return these frozen records; they
save, load and render on a machine with no ranks. The seed's printed numbers and the checks
against them live here too: plain arithmetic on a record.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpviz.core.record import record_kind
from dpviz.lessons.exercises.records import Verdict

# --- 1. the worked example (seed 002 §4.3) -----------------------------------------------------

# The seed prints y1 = 2, y2 = 4 for x1 = 1, x2 = 2 (y = 2x) and never prints y3, y4: they follow
# the same rule, so the data are x = 1..4, y = 2x, and the best w is 2.
WORKED_X = (1.0, 2.0, 3.0, 4.0)
WORKED_Y = (2.0, 4.0, 6.0, 8.0)
WORKED_W0, WORKED_LR = 1.0, 0.1

# What seed 002 prints for iteration 1 (its worker 1 = our rank 0, worker 2 = rank 1).
SEED_PRINTED = {"loss rank 0": 5.0, "grad rank 0": -10.0, "loss rank 1": 13.0,
                "grad rank 1": -14.0, "averaged grad": -12.0, "w after step 1": 2.2}


@dataclass(frozen=True)
class WorkedStep:
    """One iteration on every rank: local loss and gradient, their average, the update."""

    step: int
    w: float                      # before the update (equal on all ranks)
    losses: tuple[float, ...]     # per rank, on its own shard
    grads: tuple[float, ...]      # per rank: d(local loss)/dw
    averaged_grad: float          # all_reduce(sum) / world_size, as every rank received it
    w_after: float


@record_kind("worked_example")
@dataclass(frozen=True)
class WorkedExample:
    """The worked example run live; `reduction` is how each rank's loss adds its samples."""

    reduction: str                # "sum" (the seed's worked numbers) or "mean" (its §4.2 ℓ_n)
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    lr: float
    steps: tuple[WorkedStep, ...]
    max_w_diff_across_ranks: float


@dataclass(frozen=True)
class SeedCheck:
    """One number the seed prints next to the live value."""

    quantity: str
    printed: float
    live: float

    @property
    def agrees(self) -> bool:
        return abs(self.printed - self.live) < 1e-9


def check_seed(example: WorkedExample) -> list[SeedCheck]:
    """The seed's iteration-1 numbers against the live run with the same (sum) loss."""
    if example.reduction != "sum" or len(example.steps[0].losses) != 2:
        raise ValueError("the seed's numbers are for the per-worker *sum* loss on 2 ranks: "
                         "run worked_example(world_size=2, reduction='sum')")
    first = example.steps[0]
    live = {"loss rank 0": first.losses[0], "grad rank 0": first.grads[0],
            "loss rank 1": first.losses[1], "grad rank 1": first.grads[1],
            "averaged grad": first.averaged_grad, "w after step 1": first.w_after}
    return [SeedCheck(q, SEED_PRINTED[q], live[q]) for q in SEED_PRINTED]


def grad_without_chain_factor(xs, ys, w: float) -> float:
    """Σ 2(w·x − y) over a shard: d loss/dz summed, i.e. the gradient with the ·x factor dropped.

    For rank 1's shard (x = 3, 4; y = 6, 8) at w = 1 this is −14, the seed's printed gradient.
    """
    return sum(2 * (w * x - y) for x, y in zip(xs, ys))


def loss_readings(xs, ys, w: float) -> dict[str, float]:
    """Every plain reading of "the loss on this shard", to hold the seed's printed value against.

    For rank 1's shard (x = 3, 4; y = 6, 8) at w = 1 none gives the seed's 13: the sum of
    squared errors is 25, their mean 12.5, half the sum 12.5, the sum of |errors| 7. Assuming
    the example's y = 2x, data giving 13 has x = 2, 3, whose gradient is −26, not −14 (free
    targets can give both, e.g. y = 6.50, 3.13 at x = 3, 4): the 13 cannot be derived from the
    example's numbers.
    """
    errors = [w * x - y for x, y in zip(xs, ys)]
    sq = [e * e for e in errors]
    return {"Σ (z − y)²": sum(sq), "mean (z − y)²": sum(sq) / len(sq), "½ Σ (z − y)²": sum(sq) / 2,
            "Σ |z − y|": sum(abs(e) for e in errors), "mean |z − y|": sum(abs(e) for e in errors) / len(errors)}


# --- 2. uneven shards ----------------------------------------------------------------------------

@record_kind("uneven_shards")
@dataclass(frozen=True)
class UnevenShards:
    """Gradients of one MLP on shards of unequal size, aggregated four ways, vs the full batch."""

    sizes: tuple[int, ...]                 # M_n per rank
    full_grad_norm: float                  # ‖∇ mean loss over all M samples‖
    local_grad_norms: tuple[float, ...]    # ‖g_n‖ per rank
    errors: dict[str, float]               # aggregation → max |aggregate − full| over parameters
    relative_errors: dict[str, float]      # aggregation → ‖aggregate − full‖ / ‖full‖
    rounding_bound: float | None = None    # what float32 re-ordering alone can reach in `errors`


AGGREGATIONS = ("weighted Σ (M_n/M)·g_n", "plain mean (1/N)·Σ g_n", "DDP, loss as is",
                "DDP, loss × N·M_n/M")


# --- 3. parameter averaging (local SGD) vs gradient averaging --------------------------------------

PERIODS = (1, 2, 4, 8, 16, 32)   # the H a period slider offers


@dataclass(frozen=True)
class AveragingRun:
    """One training run: per step, replica drift and losses; communication it needed."""

    mode: str                         # "gradient" (DDP, every step) or "parameter" (every H steps)
    period: int                       # H: steps between averages (1 for gradient averaging)
    drift: tuple[float, ...]          # per step, before any averaging: RMS over ranks of ‖θ_r − θ̄‖
    eval_loss: tuple[float, ...]      # per step: loss of the averaged model θ̄ on a held-out batch
    train_loss: tuple[float, ...]     # per step: mean over ranks of the local mini-batch loss
    averages: int                     # all-reduces the algorithm itself issued
    bytes_per_average: int            # payload of one such all-reduce (all parameters)


@record_kind("averaging_comparison")
@dataclass(frozen=True)
class AveragingComparison:
    config: dict
    runs: tuple[AveragingRun, ...]


# --- 4. a gradient hook that averages the weights (picotron #39) --------------------------------

HOOK_MODES = ("gradient", "weight")   # what the post-accumulate-grad hook all-reduces


@dataclass(frozen=True)
class HookRun:
    """Training with a hand-written averaging hook, checked three ways after every step."""

    mode: str                               # "gradient" (right) or "weight" (the bug)
    params_after_backward: tuple[float, ...]  # per step: max |θ_r − θ_0| right after backward
    params_after_step: tuple[float, ...]    # per step: max |θ_r − θ_0| after optimizer.step()
    grads_after_backward: tuple[float, ...]  # per step: max |∇_r − ∇_0| right after backward
    vs_large_batch: tuple[float, ...]       # per step: max |θ_0 − one process on the whole batch|


@record_kind("hook_comparison")
@dataclass(frozen=True)
class HookComparison:
    config: dict
    runs: tuple[HookRun, ...]

    def run(self, mode: str) -> HookRun:
        return next(r for r in self.runs if r.mode == mode)


# --- the exercise's check, as the report and its figure read it ---------------------------

@dataclass(frozen=True)
class GradientRun:
    """Per parameter: the gradient's norm relative to the right one (1 = right)."""

    names: tuple[str, ...]
    norm_ratio: tuple[float, ...]       # ‖gradient‖ / ‖expected‖, rank 0
    max_diff: tuple[float, ...]         # max |gradient − expected| over ranks
    tolerance: tuple[float, ...]        # the largest allowed difference (float32 rounding)


@record_kind("hook_exercise")
@dataclass(frozen=True)
class HookCheck:
    verdict: Verdict
    world_size: int
    yours: GradientRun | None = None
    unsynced_ratio: tuple[float, ...] = ()   # ‖rank 0's own gradient‖ / ‖expected‖: no communication

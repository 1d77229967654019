"""ZeRO, the data side: the paper's memory model (the calculator), what a live sharded run
records per rank, and the reading of its traces. No torch: renderers and `load()` import this;
`dpviz.lessons.zero.live` runs DDP, ZeroRedundancyOptimizer and FSDP2 on live ranks.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpviz.analysis.scan import spans_from_trace
from dpviz.core.record import record_kind
from dpviz.core.workloads import WorkloadInfo
from dpviz.lessons.exercises.records import Verdict

FACADE = ("zero_memory",)  # what `dpviz.<name>` offers from here

STAGES = (0, 1, 2, 3)
STRATEGIES = {"ddp": 0, "zero1": 1, "fsdp": 3}   # live strategy → the ZeRO stage it is
ADAM_LR = 1e-3
K_MIXED = 12        # bytes of optimizer state per parameter, mixed-precision Adam
K_FP32 = 8          # fp32 Adam: the fp32 parameters are their own master copy, + m and v


@dataclass(frozen=True)
class Recipe:
    """Bytes per parameter of one training recipe: parameters, gradients, optimizer state (K)."""

    param_bytes: float
    grad_bytes: float
    k: float
    holds: str          # what the K bytes are

    @property
    def per_param(self) -> float:
        return self.param_bytes + self.grad_bytes + self.k


RECIPES = {
    "mixed-precision Adam": Recipe(2, 2, K_MIXED, "fp32 master weights + m + v"),
    "fp32 Adam": Recipe(4, 4, K_FP32, "m + v (the fp32 parameters are their own master copy)"),
    "mixed-precision SGD+momentum": Recipe(2, 2, 8, "fp32 master weights + momentum"),
    "fp32 SGD+momentum": Recipe(4, 4, 4, "momentum"),
}


# --- the calculator ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ZeroBytes:
    """Bytes one rank holds for model states under one ZeRO stage."""

    stage: int
    world_size: int
    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def zero_memory(psi: float, world_size: int, stage: int, k: float = K_MIXED,
                param_bytes: float = 2, grad_bytes: float = 2) -> ZeroBytes:
    """Per-rank bytes of parameters, gradients and optimizer state (ZeRO paper, Fig. 1).

    Stage 0 (plain DP): (2 + 2 + K)Ψ. Stage 1: 2Ψ + 2Ψ + KΨ/N. Stage 2: 2Ψ + (2 + K)Ψ/N.
    Stage 3: (2 + 2 + K)Ψ/N. For fp32 training pass param_bytes=grad_bytes=4, k=8.
    """
    if stage not in STAGES:
        raise ValueError(f"ZeRO stage must be one of {STAGES}, got {stage!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a whole number >= 1, got {world_size!r}")
    if not psi > 0 or not min(k, param_bytes, grad_bytes) >= 0:
        raise ValueError(f"need psi > 0 parameters and k, param_bytes, grad_bytes >= 0 bytes per "
                         f"parameter, got {psi}, {k}, {param_bytes}, {grad_bytes}")
    n = world_size
    return ZeroBytes(stage, n,
                     params=param_bytes * psi / (n if stage >= 3 else 1),
                     grads=grad_bytes * psi / (n if stage >= 2 else 1),
                     optimizer=k * psi / (n if stage >= 1 else 1))


def recipe_memory(psi: float, world_size: int, stage: int, recipe: str | Recipe) -> ZeroBytes:
    """`zero_memory` with the bytes of a named recipe (a key of RECIPES) or a Recipe."""
    if isinstance(recipe, str):
        if recipe not in RECIPES:
            raise ValueError(f"unknown recipe {recipe!r}; choose one of {', '.join(RECIPES)}")
        recipe = RECIPES[recipe]
    return zero_memory(psi, world_size, stage, recipe.k, recipe.param_bytes, recipe.grad_bytes)


def smallest_stage_that_fits(psi: float, world_size: int, device_bytes: float,
                             recipe: str | Recipe = "mixed-precision Adam") -> int | None:
    """The lowest ZeRO stage whose model states fit in `device_bytes` (None: none fits).

    Model states only: activations and buffers need room on top of this.
    """
    for stage in STAGES:
        if recipe_memory(psi, world_size, stage, recipe).total <= device_bytes:
            return stage
    return None


# --- the record -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShardedRank:
    """What one rank held and sent in the last step of a live sharded run."""

    strategy: str
    stage: int
    world_size: int
    rank: int
    n_params: int                    # Ψ of the whole model
    param_bytes: int                 # this rank's parameters (its shard under FSDP)
    grad_bytes: int                  # gradients held after backward, before the step
    optimizer_bytes: int             # Adam's exp_avg + exp_avg_sq held by this rank
    step_bytes: int                  # Adam's per-parameter step counters (tiny)
    collectives: dict[str, int]      # gloo:* events in the last step (what gloo ran)
    collective_bytes: dict[str, int]  # their input bytes (from the trace's recorded shapes)
    launches: dict[str, int]         # c10d::* events in the last step (what PyTorch asked for)
    collectives_by_step: tuple[dict[str, int], ...] = ()   # gloo:* events in every step, in order
    max_diff_vs_single_process: float | None = None   # rank 0: |params − one-process Adam|
    # rank 0: max over parameters of |Δθ| ÷ its float32 rounding bound (≤ 1: rounding only;
    # see rounding.adam_entry_bounds for why Adam needs a bound per parameter)
    diff_over_rounding_bound: float | None = None


@record_kind("zero_sweep")
@dataclass(frozen=True)
class ZeroSweep:
    """Live sharded runs: every strategy × world size × rank."""

    config: dict
    ranks: tuple[ShardedRank, ...]
    workload: WorkloadInfo | None = None    # the model trained: name and parameter list

    def rows(self, strategy: str | None = None, world_size: int | None = None) -> list[ShardedRank]:
        return [r for r in self.ranks if (strategy is None or r.strategy == strategy)
                and (world_size is None or r.world_size == world_size)]

    @property
    def world_sizes(self) -> list[int]:
        return sorted({r.world_size for r in self.ranks})

    @property
    def strategies(self) -> list[str]:
        return [s for s in STRATEGIES if any(r.strategy == s for r in self.ranks)]


def model_for(row: ShardedRank) -> ZeroBytes:
    """The calculator's prediction for a live fp32 row (4Ψ + 4Ψ + 8Ψ, divided per stage)."""
    return zero_memory(row.n_params, row.world_size, row.stage, k=K_FP32, param_bytes=4, grad_bytes=4)


# --- rank side --------------------------------------------------------------------------------

def count_collectives(trace: dict, rank: int, steps: int) -> list[tuple[dict[str, int], dict[str, int],
                                                                        dict[str, int]]]:
    """Collectives in each of the first `steps` dpviz steps of one rank's trace, by name.

    Returns one (gloo:* counts, their input bytes, c10d::* counts) per step. The gloo events
    are what actually ran; the c10d ones are what PyTorch asked for (on gloo, a
    `c10d::_reduce_scatter_base_` launch runs as a `gloo:all_reduce`). The trace is read into
    spans once for every step: reading it is most of a sharded rank's work after training.
    """
    spans = spans_from_trace(trace, rank)
    windows = sorted((s for s in spans if s.kind == "step"), key=lambda s: s.start_us)
    if steps > len(windows):
        raise ValueError(f"the trace has {len(windows)} dpviz steps, asked for {steps}")
    windows = windows[:steps]
    counts: list[dict[str, int]] = [{} for _ in windows]
    sizes: list[dict[str, int]] = [{} for _ in windows]
    launches: list[dict[str, int]] = [{} for _ in windows]

    def step_of(t_us: float) -> int | None:
        return next((i for i, w in enumerate(windows) if w.start_us <= t_us < w.end_us), None)

    for s in spans:
        i = step_of(s.start_us) if s.name.startswith("gloo:") else None
        if i is not None:
            counts[i][s.name] = counts[i].get(s.name, 0) + 1
            sizes[i][s.name] = sizes[i].get(s.name, 0) + (s.bytes or 0)
    for ev in trace["traceEvents"]:
        name = str(ev.get("name", "")) if isinstance(ev, dict) else ""
        i = step_of(float(ev["ts"])) if name.startswith("c10d::") and ev.get("ph") == "X" else None
        if i is not None:
            launches[i][name] = launches[i].get(name, 0) + 1
    return list(zip(counts, sizes, launches))


# --- parent side ------------------------------------------------------------------------------

def describe_zero_sweep(sweep: ZeroSweep) -> str:
    """One row per rank: bytes held against the calculator, and rank 0's distance from one
    process running Adam on the whole batch, also as a multiple of its float32 rounding bound
    (≤ 1: rounding only; see rounding.adam_entry_bounds) — a table, not a dict."""
    head = (f"{'strategy':8s} {'N':>2s} {'rank':>4s} {'params B':>10s} {'grads B':>10s} "
            f"{'Adam m+v B':>11s} {'calculator':>11s} {'max |θ − one-process Adam|':>27s} "
            f"{'÷ rounding bound':>16s}")
    lines = [head, "-" * len(head)]
    for r in sweep.ranks:
        diff = "" if r.max_diff_vs_single_process is None else f"{r.max_diff_vs_single_process:.1e}"
        ratio = "" if r.diff_over_rounding_bound is None else f"{r.diff_over_rounding_bound:.2g}"
        lines.append(f"{r.strategy:8s} {r.world_size:2d} {r.rank:4d} {r.param_bytes:10,d} "
                     f"{r.grad_bytes:10,d} {r.optimizer_bytes:11,d} {int(model_for(r).optimizer):11,d} "
                     f"{diff:>27s} {ratio:>16s}")
    return "\n".join(lines)


# --- the exercise's check, as the report and its figure read it ---------------------------

@dataclass(frozen=True)
class Zero1Run:
    """Your ZeRO-1 steps beside plain Adam: per rank, |difference| along the flat parameters
    and the bytes your `state` held."""

    world_size: int
    psi: int                                      # parameters in the flat vector
    steps: int
    abs_diff: tuple[tuple[float, ...], ...]       # rank → element → |yours − plain Adam|
    tolerance: float
    state_bytes: tuple[int, ...]                  # rank → bytes of tensors in your state
    all_gathers: tuple[int, ...]                  # rank → comm.all_gather calls


@record_kind("zero1_exercise")
@dataclass(frozen=True)
class Zero1Check:
    verdict: Verdict
    yours: Zero1Run | None = None

"""ZeRO / FSDP: the memory model of the ZeRO paper, and a real sharded run beside it.

Model (Rajbhandari et al., 2019, mixed-precision Adam): a replica of a Ψ-parameter model
holds 2Ψ bytes of fp16 parameters, 2Ψ of fp16 gradients and KΨ of optimizer state
(K = 12: fp32 master weights, first and second moments, 4 bytes each). ZeRO stage 1 shards
the optimizer state over N data-parallel ranks, stage 2 also the gradients, stage 3 also
the parameters — each sharded part is divided by N.

Reality (live CPU gloo ranks, fp32 Adam, so 4Ψ + 4Ψ + 8Ψ): stage 0 is DDP + Adam, stage 1
is DDP + `ZeroRedundancyOptimizer` (each rank steps its slice of the parameters, then
broadcasts it), stage 3 is FSDP2 `fully_shard` (all-gather parameters before each layer's
forward and backward, reduce-scatter its gradients). Bytes are read from the live tensors
after a real step; the collectives are counted from each rank's profiler trace.
Stage 2 has no separate live run. The paper's stage 2 (DeepSpeed's) keeps the parameters
replicated at all times. PyTorch's nearest configuration, FSDP with
`reshard_after_forward=False` (FSDP1: `ShardingStrategy.SHARD_GRAD_OP`), keeps the gathered
parameters from forward through backward — the paper's stage-2 bytes during the step — but
reshards them after backward, so between steps it holds stage 3's bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import RunConfig, validate, validate_world_size
from .launch import Cluster, RankContext
from .record import record_kind
from .trace import STEP_PREFIX, read_trace, spans_from_trace

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

def _group(ctx: RankContext, n: int):
    """The first `n` ranks as a process group (every rank must call this, member or not)."""
    import torch.distributed as dist

    return dist.group.WORLD if n == ctx.world_size else dist.new_group(ranks=list(range(n)))


def _wrap(model, strategy: str, group):
    """(module to call, optimizer) for one strategy over `group`; the optimizer is Adam."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    if strategy == "ddp":
        ddp = DDP(model, process_group=group)
        return ddp, torch.optim.Adam(ddp.parameters(), lr=ADAM_LR)
    if strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        ddp = DDP(model, process_group=group)
        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam,
                                            process_group=group, lr=ADAM_LR)
    if strategy == "fsdp":
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard

        mesh = DeviceMesh.from_group(group, "cpu")  # FSDP2 needs a mesh, on CPU too
        for layer in model:                 # one FSDP unit per Linear: gathered just in time
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, torch.optim.Adam(model.parameters(), lr=ADAM_LR)
    raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")


def single_process_adam(cfg: RunConfig) -> tuple["torch.Tensor", list]:
    """One process, Adam, the concatenated global batches: what every strategy must equal.
    Returns the final flat parameters and the flat gradient of every step."""
    import torch

    from .workloads import build_mlp, flat_params, global_batch, loss_fn

    model = build_mlp(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR)
    grads = []
    for step in range(cfg.steps):
        x, y = global_batch(cfg, step, 0)
        loss_fn(model(x), y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        opt.step()
        opt.zero_grad(set_to_none=True)
    return flat_params(model), grads


def compare_with_single_process(cfg: RunConfig, params) -> tuple[float, float]:
    """(max |θ − one-process Adam|, max of |Δθ| ÷ its per-parameter rounding bound)."""
    from .rounding import adam_entry_bounds, mlp_sums

    single, grads = single_process_adam(cfg)
    diff = (params - single).abs()
    bounds = adam_entry_bounds(grads, ADAM_LR, mlp_sums(cfg), float(single.abs().max()))
    return float(diff.max()), float((diff / bounds).max())


def shard_rank(ctx: RankContext, cfg: RunConfig, strategy: str) -> dict | None:
    """Train `cfg.steps` Adam steps under one strategy on the first `cfg.world_size` ranks;
    bytes held and collectives traced. Ranks outside that group return None.

    One warm cluster serves every world size up to its own: no cold start per size. The
    collectives of the last step are kept apart: with `cfg.steps >= 3` it is a steady DDP step
    (step 0 uses one bucket, and step 1's forward broadcasts the rebuilt bucket order once).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from .memory import optimizer_state_bytes, tensor_bytes
    from .workloads import build_mlp, loss_fn, rank_batch

    if cfg.world_size > ctx.world_size:
        raise ValueError(f"world size {cfg.world_size} needs a cluster of at least that many ranks")
    group = _group(ctx, cfg.world_size)
    if ctx.rank >= cfg.world_size:
        return None
    model = build_mlp(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    module, opt = _wrap(model, strategy, group)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for step in range(cfg.steps):
            with record_function(f"{STEP_PREFIX}{step}"):
                x, y = rank_batch(cfg, step, 0, ctx.rank)
                loss_fn(module(x), y).backward()
                grad_bytes = sum(tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)
                opt.step()
                opt.zero_grad(set_to_none=True)
    path = Path(ctx.workdir) / f"zero-{strategy}-rank{ctx.rank}.json"
    prof.export_chrome_trace(str(path))
    trace = read_trace(path)
    path.unlink()
    gloo, gloo_bytes, c10d = count_collectives(trace, ctx.rank, step=cfg.steps - 1)
    by_step = [count_collectives(trace, ctx.rank, step)[0] for step in range(cfg.steps - 1)] + [gloo]
    state = optimizer_state_bytes(opt)
    # the check runs after profiling: FSDP's full_tensor() is itself an all-gather
    full = torch.cat([(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().reshape(-1)
                      for p in model.parameters()])
    diff, ratio = compare_with_single_process(cfg, full) if ctx.rank == 0 else (None, None)
    return dict(strategy=strategy, stage=STRATEGIES[strategy], world_size=cfg.world_size,
                rank=ctx.rank, n_params=n_params,
                param_bytes=sum(tensor_bytes(p) for p in model.parameters()),
                grad_bytes=grad_bytes,
                optimizer_bytes=state.get("exp_avg", 0) + state.get("exp_avg_sq", 0),
                step_bytes=state.get("step", 0), collectives=gloo, collective_bytes=gloo_bytes,
                launches=c10d, collectives_by_step=by_step,
                max_diff_vs_single_process=diff, diff_over_rounding_bound=ratio)


def count_collectives(trace: dict, rank: int, step: int) -> tuple[dict[str, int], dict[str, int],
                                                                  dict[str, int]]:
    """Collectives in one step of one rank's trace, by name.

    Returns (gloo:* counts, their input bytes, c10d::* counts). The gloo events are what
    actually ran; the c10d ones are what PyTorch asked for (on gloo, a
    `c10d::_reduce_scatter_base_` launch runs as a `gloo:all_reduce`).
    """
    spans = spans_from_trace(trace, rank)
    windows = sorted((s for s in spans if s.kind == "step"), key=lambda s: s.start_us)
    if step >= len(windows):
        raise ValueError(f"the trace has {len(windows)} dpviz steps, asked for step {step}")
    lo, hi = windows[step].start_us, windows[step].end_us
    counts: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for s in spans:
        if s.name.startswith("gloo:") and lo <= s.start_us < hi:
            counts[s.name] = counts.get(s.name, 0) + 1
            sizes[s.name] = sizes.get(s.name, 0) + (s.bytes or 0)
    launches: dict[str, int] = {}
    for ev in trace["traceEvents"]:
        name = str(ev.get("name", "")) if isinstance(ev, dict) else ""
        if name.startswith("c10d::") and ev.get("ph") == "X" and lo <= float(ev["ts"]) < hi:
            launches[name] = launches.get(name, 0) + 1
    return counts, sizes, launches


# --- parent side ------------------------------------------------------------------------------

def run_sharded(cfg: RunConfig | None = None, world_sizes: tuple[int, ...] = (1, 2, 4),
                strategies: tuple[str, ...] = tuple(STRATEGIES)) -> ZeroSweep:
    """Every strategy at every world size on live gloo ranks.

    One warm cluster of the largest size; smaller world sizes run on its first ranks.
    """
    cfg = validate(cfg or RunConfig(steps=3))
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {', '.join(STRATEGIES)}")
    if cfg.backend != "gloo":
        raise ValueError("the sharded demo runs on CPU gloo ranks: use backend='gloo'")
    if not world_sizes:
        raise ValueError("give at least one world size, e.g. world_sizes=(1, 2, 4)")
    for n in world_sizes:
        validate_world_size(n, "gloo")
    rows = []
    with Cluster(max(world_sizes), "gloo", cfg.timeout_s) as cluster:
        for n in world_sizes:
            for strategy in strategies:
                rows += cluster.run_task(shard_rank, cfg.replace(world_size=n), strategy,
                                         timeout_s=cfg.timeout_s)
    return ZeroSweep(config=cfg.to_dict(),
                     ranks=tuple(ShardedRank(**{**r, "collectives_by_step": tuple(r["collectives_by_step"])})
                                 for r in rows if r is not None))


def describe_sweep(sweep: ZeroSweep) -> str:
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

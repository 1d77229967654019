"""Gradient accumulation with `no_sync()`: its schedule, its savings, and why it is right.

K micro-batches per optimizer step: the first K−1 run forward and backward inside
`ddp.no_sync()`, so gradients only add up locally; the last one syncs, and DDP all-reduces
each bucket once. Per optimizer step the traffic is the same for every K, so per sample
it falls as 1/K. Three things are measured here on live ranks:

1. the sweep over K (all-reduces, bytes and time per optimizer step and per sample),
2. the gradient the run loop accumulates, against one process on the large batch of
   micro × K × world samples (equal with the loss scaled by 1/K, K× too large without),
3. where `no_sync()` goes: around forward and backward, around backward only, or nowhere.

Why "backward only" fails: `no_sync()` only clears `ddp.require_backward_grad_sync`, and
DDP reads that flag in *forward*: when it is set, `_post_forward` calls
`reducer.prepare_for_backward`, which arms the autograd hooks that all-reduce the buckets.
Once forward ran outside `no_sync()`, the coming backward all-reduces whatever the flag
says by then. Gradients stay right either way (averaging is linear); the traffic is K×.

This module imports torch only inside functions that run on ranks: records load without it.
"""
from __future__ import annotations

import dataclasses
import statistics
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Iterable

from .config import NO_SYNC_SCOPES, RunConfig, validate
from .ddp_run import run
from .launch import Cluster, RankContext
from .record import RunRecord, record_kind
from .timeline import quartiles, steady_steps, summarize_step

# Small enough to run K = 1..8 in seconds on 2 cores; a 0.25 MB bucket cap splits the
# 1 MB MLP into several buckets, so "one all-reduce per bucket" is visible.
DEMO_CONFIG = RunConfig(world_size=2, steps=4, layers=4, width=256, batch_per_rank=16,
                        bucket_cap_mb=0.25)


# --- records ------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepRow:
    """One K of the sweep: medians over steady steps (rank 0's trace for the counts)."""

    accum_steps: int
    samples_per_step: int                 # micro × K × world: the optimizer's batch
    all_reduces_per_micro: tuple[int, ...]  # last steady step: 0 … 0 n_buckets
    all_reduces_per_step: float
    bytes_per_step: float                 # all-reduced payload per rank per optimizer step
    bytes_per_sample: float
    step_ms: float                        # step span, median over steady steps and ranks
    ms_per_sample: float
    comm_ms: float = 0.0                  # wall time an all-reduce runs in the step (median)
    step_ms_quartiles: tuple[float, float] = (0.0, 0.0)   # spread of step_ms: 25th, 75th pct


@dataclass(frozen=True)
class GradientCheck:
    """The gradient the run loop accumulated over one step, vs one process on the large batch."""

    accum_steps: int
    scale_loss: bool
    no_sync: str
    all_reduces_per_micro: tuple[int, ...]  # buckets the comm hook saw in each micro-step
    max_diff_across_ranks: float
    max_diff_vs_large_batch: float
    reference_max_abs: float              # max |large-batch gradient|: the scale of the diffs
    norm_ratio: float                     # ‖accumulated‖ / ‖large batch‖: 1 right, K unscaled


@record_kind("accumulation_sweep")
@dataclass(frozen=True)
class AccumulationSweep:
    """What accumulation costs per K and whether its gradient is right, from live ranks."""

    config: dict                          # the base RunConfig; accum_steps varies by row
    world_size: int
    rows: tuple[SweepRow, ...]
    gradients: tuple[GradientCheck, ...] = ()


# --- pure functions of records ------------------------------------------------------------

def micro_step_counts(record: RunRecord, step: int) -> tuple[int, ...]:
    """All-reduces launched in each micro-step of `step` (rank 0's trace)."""
    counts = sorted((m.micro_step, m.all_reduces) for m in record.micro_steps if m.step == step)
    if not counts:
        raise ValueError(f"step {step} has no micro-steps in this record (steps: {record.steps}); "
                         "record a run with profile=True")
    return tuple(n for _, n in counts)


def sweep_row(*records: RunRecord) -> SweepRow:
    """Reduce runs of one K (repeats) to its sweep row: medians over all their steady steps."""
    if len({r.config["accum_steps"] for r in records}) != 1:
        raise ValueError("records of different K make one row each")
    record = records[-1]
    k, ranks = record.config["accum_steps"], range(record.world_size)
    samples = record.config["batch_per_rank"] * k * record.world_size
    steps = steady_steps(record)
    counts, sizes = [], []
    for step in steps:
        reduces = record.spans_of(rank=0, kind="allreduce", step=step)
        if any(s.bytes is None for s in reduces):
            raise ValueError("this record's all-reduce spans carry no sizes: record it with "
                             "dpviz.run (profiler with record_shapes=True)")
        counts.append(len(reduces))
        sizes.append(sum(s.bytes for s in reduces))
    summaries = [summarize_step(list(rec.spans), r, s)
                 for rec in records for r in ranks for s in steady_steps(rec)]
    step_ms = statistics.median(x.step_ms for x in summaries)
    per_step = statistics.median(sizes)
    return SweepRow(accum_steps=k, samples_per_step=samples,
                    all_reduces_per_micro=micro_step_counts(record, steps[-1]),
                    all_reduces_per_step=statistics.median(counts),
                    bytes_per_step=per_step, bytes_per_sample=per_step / samples,
                    step_ms=step_ms, ms_per_sample=step_ms / samples,
                    comm_ms=statistics.median(x.comm_ms for x in summaries),
                    step_ms_quartiles=quartiles([x.step_ms for x in summaries]))


def run_lengths(counts: Iterable[int]) -> str:
    """'0×7, 4' for [0, 0, 0, 0, 0, 0, 0, 4]: short at any K, so table columns stay aligned."""
    groups: list[list[int]] = []
    for n in counts:
        if groups and groups[-1][0] == n:
            groups[-1][1] += 1
        else:
            groups.append([n, 1])
    return ", ".join(f"{n}×{k}" if k > 1 else str(n) for n, k in groups)


def describe_sweep(sweep: AccumulationSweep) -> str:
    """The sweep as a table and its verdict on time per sample (CLI and notebook)."""
    from .link import describe_link

    lines = [f"{sweep.world_size} ranks, {sweep.config['batch_per_rank']} samples per rank per "
             f"micro-step; medians over steady steps; {describe_link(sweep.config.get('link'))}",
             f"{'K':>3} {'samples':>8} {'all-reduces/micro':>18} {'KB/step':>9} {'B/sample':>9} "
             f"{'ms/step':>8} {'(IQR)':>11} {'comm ms':>8} {'ms/sample':>10}"]
    for r in sweep.rows:
        iqr = f"{r.step_ms_quartiles[0]:.0f}-{r.step_ms_quartiles[1]:.0f}"
        lines.append(f"{r.accum_steps:>3} {r.samples_per_step:>8} "
                     f"{run_lengths(r.all_reduces_per_micro):>18} {r.bytes_per_step / 1024:>9.1f} "
                     f"{r.bytes_per_sample:>9.0f} {r.step_ms:>8.2f} {iqr:>11} {r.comm_ms:>8.2f} "
                     f"{r.ms_per_sample:>10.4f}")
    if len(sweep.rows) > 1:
        lines.append(time_per_sample_verdict(sweep))
    if sweep.gradients:
        lines.append(describe_gradients(sweep.gradients))
    return "\n".join(lines)


def time_per_sample_verdict(sweep: AccumulationSweep) -> str:
    """Does time per sample fall with K on this run, and by more than the spread?"""
    rows = sweep.rows
    falls = all(a.ms_per_sample > b.ms_per_sample for a, b in zip(rows, rows[1:]))
    first, last = rows[0], rows[-1]
    text = (f"time per sample, K={last.accum_steps} vs K={first.accum_steps}: "
            f"{last.ms_per_sample / first.ms_per_sample:.2f}x; "
            + ("it falls at every K on this run" if falls else "it does not fall at every K on this run"))
    noisy = [r.accum_steps for r in rows
             if r.step_ms_quartiles[1] - r.step_ms_quartiles[0] > 0.25 * r.step_ms]
    if noisy:
        text += (f"; step-time spread (IQR) over a quarter of the median at K = "
                 f"{', '.join(map(str, noisy))}: read those rows as rough")
    return text


def describe_gradients(checks: Iterable[GradientCheck]) -> str:
    """Gradient checks as a table: is the accumulated gradient the large-batch one?"""
    lines = [f"{'K':>3} {'1/K loss':>8} {'no_sync':>17} {'all-reduces/micro':>18} "
             f"{'|g|/|g_large|':>13} {'max diff':>9} {'max|g_large|':>12} {'across ranks':>12}"]
    for c in checks:
        lines.append(f"{c.accum_steps:>3} {str(c.scale_loss):>8} {c.no_sync:>17} "
                     f"{run_lengths(c.all_reduces_per_micro):>18} {c.norm_ratio:>13.4f} "
                     f"{c.max_diff_vs_large_batch:>9.1e} {c.reference_max_abs:>12.1e} "
                     f"{c.max_diff_across_ranks:>12.1e}")
    return "\n".join(lines)


def describe_scopes(records: dict[str, RunRecord]) -> str:
    """Where no_sync goes vs what the trace and the parameters show (steady step)."""
    lines = [f"{'no_sync':>17} {'all-reduces/micro':>18} {'KB/step':>8} "
             f"{'params vs 1 process':>20} {'across ranks':>12}"]
    for scope, record in records.items():
        row = sweep_row(record)
        vs_single = max(c.max_diff_vs_single_process for c in record.checks)
        across = max(c.max_diff_across_ranks for c in record.checks)
        lines.append(f"{scope:>17} {run_lengths(row.all_reduces_per_micro):>18} "
                     f"{row.bytes_per_step / 1024:>8.1f} {vs_single:>20.1e} {across:>12.1e}")
    return "\n".join(lines)


# --- live runs ----------------------------------------------------------------------------

def sweep(ks: Iterable[int] = range(1, 9), cfg: RunConfig | None = None,
          cluster: Cluster | None = None, repeats: int = 1) -> AccumulationSweep:
    """Run `cfg` `repeats` times per K on (warm) ranks, K round-robin (a burst of load lands
    on every K, not one), and reduce each K's runs to a row of medians."""
    cfg = validate(cfg or DEMO_CONFIG)
    ks = check_accum_values(ks)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a whole number >= 1, got {repeats!r}")
    if cluster is None:
        with Cluster(cfg.world_size, cfg.backend, cfg.timeout_s) as fresh:
            return sweep(ks, cfg, fresh, repeats)
    runs: dict[int, list[RunRecord]] = {k: [] for k in ks}
    for _ in range(repeats):
        for k in ks:
            runs[k].append(run(cfg, cluster, accum_steps=k))
    rows = tuple(sweep_row(*runs[k]) for k in ks)
    return AccumulationSweep(config=cfg.to_dict(), world_size=cfg.world_size, rows=rows)


def compare_scopes(cfg: RunConfig | None = None, cluster: Cluster | None = None,
                   scopes: Iterable[str] = NO_SYNC_SCOPES) -> dict[str, RunRecord]:
    """One live run per no_sync placement (same K, same data): scope → record."""
    cfg = validate(cfg or DEMO_CONFIG.replace(accum_steps=3))
    if cfg.accum_steps < 2:
        raise ValueError("no_sync only matters with accumulation: use accum_steps >= 2")
    if cluster is None:
        with Cluster(cfg.world_size, cfg.backend, cfg.timeout_s) as fresh:
            return compare_scopes(cfg, fresh, scopes)
    return {scope: run(cfg, cluster, no_sync=scope) for scope in scopes}


def check_gradients(cfg: RunConfig | None = None, cluster: Cluster | None = None) -> GradientCheck:
    """Accumulate one step on live ranks (the run loop's own code) and compare the gradient
    with one process on the large batch of micro × K × world samples."""
    cfg = validate(cfg or DEMO_CONFIG.replace(accum_steps=3))
    if cluster is None:
        with Cluster(cfg.world_size, cfg.backend, cfg.timeout_s) as fresh:
            return check_gradients(cfg, fresh)
    results = cluster.run_task(accumulated_gradient, cfg, timeout_s=cfg.timeout_s)
    return GradientCheck(accum_steps=cfg.accum_steps, scale_loss=cfg.scale_loss,
                         no_sync=cfg.no_sync, **results[0])


def check_accum_values(ks: Iterable[int]) -> list[int]:
    """The K values as a list, or a ValueError before any rank starts."""
    ks = list(ks)
    if not ks:
        raise ValueError("give at least one K (micro-steps per optimizer step), e.g. 1,2,4,8")
    for k in ks:
        validate(RunConfig(accum_steps=k))  # same bounds and message as the run itself
    return ks


# --- rank side ----------------------------------------------------------------------------

class _KeepGradient:
    """Stands in for the optimizer in the run loop's train step: `step()` keeps a flat copy
    of the accumulated gradient instead of applying it, so the check runs the exact code
    `dpviz run` runs."""

    def __init__(self, model):
        self.model = model
        self.flat = None

    def step(self) -> None:
        import torch

        self.flat = torch.cat([p.grad.reshape(-1) for p in self.model.parameters()]).clone()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=set_to_none)


def large_batch_gradient(cfg: RunConfig):
    """One process, one forward and backward on all micro × K × world samples of step 0.

    The mean loss over the concatenated batch is (1/K) Σ_k mean loss of micro-batch k:
    this is what accumulation with the loss scaled by 1/K must reproduce.
    """
    import torch

    from .workloads import build_mlp, global_batch, loss_fn

    model = build_mlp(cfg)
    parts = [global_batch(cfg, 0, micro) for micro in range(cfg.accum_steps)]
    x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    loss_fn(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def accumulated_gradient(ctx: RankContext, cfg: RunConfig) -> dict:
    """Rank task: step 0 of the run loop with K micro-steps; gradient and hook counts."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .ddp_run import _BucketLog, _recording_allreduce, _train_step
    from .workloads import build_mlp

    device = torch.device(ctx.device)
    model = build_mlp(cfg).to(device)
    ddp = DDP(model, bucket_cap_mb=cfg.bucket_cap_mb,
              device_ids=[device.index] if device.type == "cuda" else None)
    log = _BucketLog({p.data_ptr(): n for n, p in model.named_parameters()}, ctx.world_size)
    ddp.register_comm_hook(log, _recording_allreduce)  # counts buckets per micro-step
    keep = _KeepGradient(model)
    _train_step(ctx, cfg, ddp, keep, log, 0, lambda name: nullcontext())

    everyone = [torch.empty_like(keep.flat) for _ in range(ctx.world_size)]
    dist.all_gather(everyone, keep.flat)
    mine = keep.flat.cpu()
    out = dict(all_reduces_per_micro=tuple(sum(b["micro_step"] == m for b in log.seen)
                                           for m in range(cfg.accum_steps)),
               max_diff_across_ranks=max(float((e.cpu() - mine).abs().max()) for e in everyone))
    if ctx.rank == 0:
        reference = large_batch_gradient(cfg)
        out.update(max_diff_vs_large_batch=float((mine - reference).abs().max()),
                   reference_max_abs=float(reference.abs().max()),
                   norm_ratio=float(mine.norm() / reference.norm()))
    return out


def with_gradients(sweep_record: AccumulationSweep, checks: Iterable[GradientCheck]) -> AccumulationSweep:
    """The sweep record with gradient checks attached (what `dpviz accumulation` saves)."""
    return dataclasses.replace(sweep_record, gradients=tuple(checks))

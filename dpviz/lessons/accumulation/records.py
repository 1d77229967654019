"""Gradient accumulation, the data side: what a sweep over K and the gradient checks record,
and the pure functions that read a run's micro-steps and describe them. No torch: renderers
and `load()` import this; `dpviz.lessons.accumulation.live` runs the ranks.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Iterable

from dpviz.analysis.overlap import quartiles, steady_steps, summarize_step
from dpviz.analysis.stragglers import link_wait_ms
from dpviz.analysis.verdict import MIN_RUNS, describe_comparison, judge
from dpviz.core.record import RunRecord, record_kind
from dpviz.lessons.exercises.records import Verdict

# --- records ------------------------------------------------------------------------------

@dataclass(frozen=True)
class AccumulationRow:
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
    link_waits: tuple[float, ...] = ()    # each run's link wait per optimizer step (ms), run order


@record_kind("gradient_check")
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
    rows: tuple[AccumulationRow, ...]
    gradients: tuple[GradientCheck, ...] = ()


# --- pure functions of records ------------------------------------------------------------

def micro_step_counts(record: RunRecord, step: int) -> tuple[int, ...]:
    """All-reduces launched in each micro-step of `step` (rank 0's trace)."""
    counts = sorted((m.micro_step, m.all_reduces) for m in record.micro_steps if m.step == step)
    if not counts:
        raise ValueError(f"step {step} has no micro-steps in this record (steps: {record.steps}); "
                         "record a run with profile=True")
    return tuple(n for _, n in counts)


def accumulation_row(*records: RunRecord) -> AccumulationRow:
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
    return AccumulationRow(accum_steps=k, samples_per_step=samples,
                    all_reduces_per_micro=micro_step_counts(record, steps[-1]),
                    all_reduces_per_step=statistics.median(counts),
                    bytes_per_step=per_step, bytes_per_sample=per_step / samples,
                    step_ms=step_ms, ms_per_sample=step_ms / samples,
                    comm_ms=statistics.median(x.comm_ms for x in summaries),
                    step_ms_quartiles=quartiles([x.step_ms for x in summaries]),
                    link_waits=tuple(link_wait_ms(rec) for rec in records))


def run_lengths(counts: Iterable[int]) -> str:
    """'0×7, 4' for [0, 0, 0, 0, 0, 0, 0, 4]: short at any K, so table columns stay aligned."""
    groups: list[list[int]] = []
    for n in counts:
        if groups and groups[-1][0] == n:
            groups[-1][1] += 1
        else:
            groups.append([n, 1])
    return ", ".join(f"{n}×{k}" if k > 1 else str(n) for n, k in groups)


def describe_accumulation_sweep(sweep: AccumulationSweep) -> str:
    """The sweep as a table and its verdict on time per sample (CLI and notebook)."""
    from dpviz.core.link import describe_link

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
        lines.append(link_per_sample_verdict(sweep))
    if sweep.gradients:
        lines.append(describe_gradients(sweep.gradients))
    return "\n".join(lines)


def link_per_sample_verdict(sweep: AccumulationSweep) -> str:
    """The lesson's claim judged on data: K micro-steps share one step's communication, so the
    wait for the link per sample falls with K. Compared between the sweep's largest and
    smallest K on each run's link wait per sample (µs; `dpviz.analysis.verdict`'s rule): a
    whole step's time would carry compute drift, and K-fold more compute besides."""
    first, last = sweep.rows[0], sweep.rows[-1]
    runs = min(len(first.link_waits), len(last.link_waits))
    if runs < MIN_RUNS:
        return (f"link wait per sample: {runs} run(s) per K, and the verdict rule needs {MIN_RUNS} "
                "(run more repeats to judge it)")
    per_sample = lambda row: [1e3 * w / row.samples_per_step for w in row.link_waits[:runs]]
    c = judge("link wait per sample", (f"K={last.accum_steps}", f"K={first.accum_steps}"),
              per_sample(last), per_sample(first), unit="µs")
    return describe_comparison(c)


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
        row = accumulation_row(record)
        vs_single = max(c.max_diff_vs_single_process for c in record.checks)
        across = max(c.max_diff_across_ranks for c in record.checks)
        lines.append(f"{scope:>17} {run_lengths(row.all_reduces_per_micro):>18} "
                     f"{row.bytes_per_step / 1024:>8.1f} {vs_single:>20.1e} {across:>12.1e}")
    return "\n".join(lines)


def with_gradients(sweep_record: AccumulationSweep, checks: Iterable[GradientCheck]) -> AccumulationSweep:
    """The sweep record with gradient checks attached (what `dpviz accumulation` saves)."""
    return dataclasses.replace(sweep_record, gradients=tuple(checks))


# --- the exercise's check, as the report and its figure read it ---------------------------

@dataclass(frozen=True)
class AccumulationRun:
    """One optimizer step of K micro-steps: what the comm hook saw, and the gradient."""

    all_reduces_per_micro: tuple[int, ...]     # buckets all-reduced in each micro-step (rank 0)
    sync_flag_in_hook: tuple[bool, ...] = ()   # ddp.require_backward_grad_sync in early micro-steps' hooks
    norm_ratio: float = 0.0                    # ‖gradient‖ / ‖reference‖ (1 right, K without 1/K)
    max_diff: float = 0.0
    tolerance: float = 0.0


@record_kind("accumulation_exercise")
@dataclass(frozen=True)
class AccumulationCheck:
    verdict: Verdict
    accum_steps: int
    reference: AccumulationRun | None = None     # dpviz's run loop on the same micro-batches
    yours: AccumulationRun | None = None

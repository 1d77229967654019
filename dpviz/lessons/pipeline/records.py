"""Pipeline parallelism, the data side: the schedules (which op each stage runs when), GPipe's
bubble formula, and what a measured pipeline step records. No torch: renderers and `load()`
import this; `dpviz.lessons.pipeline.live` runs the stages on live ranks.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from dpviz.core.record import record_kind

SCHEDULES = ("gpipe", "1f1b")


def gpipe_formula(stages: int, micro_batches: int) -> float:
    """GPipe's idle fraction (p−1)/(m+p−1): p−1 slots of fill and drain out of m+p−1."""
    return (stages - 1) / (micro_batches + stages - 1)


def schedule_ops(schedule: str, stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """The order in which `stage` runs its ("F", i) and ("B", i) ops."""
    m = micro_batches
    if schedule == "gpipe":          # all forwards, then backwards last-in first-out (GPipe paper)
        return [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]
    if schedule == "1f1b":
        warm = min(stages - 1 - stage, m)
        ops = [("F", i) for i in range(warm)]
        for i in range(m - warm):    # steady state: one forward, then the oldest backward
            ops += [("F", warm + i), ("B", i)]
        return ops + [("B", i) for i in range(m - warm, m)]
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


def stage_blocks(layers: int, stages: int) -> list[range]:
    """Contiguous Linear+ReLU blocks per stage, as even as possible; the head joins the last."""
    if layers < stages:
        raise ValueError(f"{layers} blocks cannot fill {stages} stages: use layers >= ranks")
    base, extra = divmod(layers, stages)
    out, lo = [], 0
    for s in range(stages):
        n = base + (1 if s < extra else 0)
        out.append(range(lo, lo + n))
        lo += n
    return out


# --- records ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StageEvent:
    """One micro-batch's forward or backward on one stage; ms from the step's first start."""

    rank: int
    kind: str          # "forward" or "backward"
    micro: int
    start_ms: float
    end_ms: float


@dataclass(frozen=True)
class PipelineStep:
    """One pipelined forward+backward of the whole batch, every rank on one clock."""

    events: tuple[StageEvent, ...]
    makespan_ms: float             # first start to last end over all ranks
    busy_ms: tuple[float, ...]     # per rank: time inside its forwards and backwards
    bubble: tuple[float, ...]      # per rank: 1 − busy / makespan (waiting, sending, idle)

    @property
    def mean_bubble(self) -> float:
        return sum(self.bubble) / len(self.bubble)


@record_kind("pipeline_run")
@dataclass(frozen=True)
class PipelineRun:
    """Repeated steps of one schedule with m micro-batches, and what they showed."""

    schedule: str
    stages: int
    micro_batches: int
    batch: int
    stage_blocks: tuple[tuple[int, ...], ...]   # block indices per stage (head on the last)
    steps: tuple[PipelineStep, ...]
    max_grad_diff: float                         # max |pipeline grad − one-process grad|
    peak_in_flight: tuple[int, ...]              # per rank: micro-batches forwarded, not yet backwarded
    peak_saved_bytes: tuple[int, ...]            # per rank: peak activation bytes autograd saved for them

    @property
    def formula(self) -> float:
        return gpipe_formula(self.stages, self.micro_batches)

    @property
    def best_step(self) -> PipelineStep:
        """The repeat with the shortest makespan: the one other processes disturbed least
        (2 shared cores: a rank that loses its core mid-step stretches the whole pipeline)."""
        return min(self.steps, key=lambda s: s.makespan_ms)

    @property
    def bubble(self) -> float:
        """Mean idle fraction over ranks in the best step (what is compared to the formula)."""
        return self.best_step.mean_bubble

    @property
    def median_bubble(self) -> float:
        """Median over repeats of the mean idle fraction: how much noise the machine added."""
        return statistics.median(s.mean_bubble for s in self.steps)


@record_kind("pipeline_sweep")
@dataclass(frozen=True)
class PipelineSweep:
    config: dict
    runs: tuple[PipelineRun, ...]

    def run(self, schedule: str, micro_batches: int) -> PipelineRun:
        return next(r for r in self.runs if r.schedule == schedule and r.micro_batches == micro_batches)

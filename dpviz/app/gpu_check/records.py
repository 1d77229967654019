"""What `scripts/gpu_check.py` found: one row per check (passed or not, its figures, why), the
machine it ran on, and the text table a maintainer pastes into the README. No torch: the
judgements on a run's record (`run_rows`, `anatomy_row`) read spans and checks only, so the
CPU run in CI exercises the same code a GPU run does.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dpviz.analysis.overlap import (
    COMPUTE_KINDS, comm_compute_overlap, intersection, length, summarize_step,
)
from dpviz.analysis.scan import COMM_KINDS
from dpviz.core.record import RunRecord

# NCCL's kernel names, old and new generation: `ncclKernel_AllReduce_RING_LL_Sum_float` (NCCL
# < 2.19), `ncclDevKernel_AllReduce_Sum_f32_RING_LL` (2.19 on).
NCCL_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel")
GPU_TID_PREFIX = "stream "          # dpviz.analysis.scan names a GPU span's lane by its CUDA stream
BUDGET_S = {"cuda": 480.0, "cpu": 120.0}   # what a maintainer can wait for: one GPU lease, one CI stage
PEAK_TOLERANCE = 0.10   # measured peak vs the √n model, as tests/test_checkpointing.py allows


@dataclass(frozen=True)
class CheckRow:
    """One check: `passed` None means not run here (`note` says why)."""

    name: str
    passed: bool | None
    figures: dict = field(default_factory=dict)
    note: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class GpuCheck:
    """The whole check on one machine: its environment, every row, and the time it took."""

    mode: str                 # "cuda" or "cpu": which equivalents ran
    environment: dict
    rows: tuple[CheckRow, ...]
    seconds: float
    date: str

    @property
    def budget_s(self) -> float:
        return BUDGET_S[self.mode]

    @property
    def passed(self) -> bool:
        """Every check that ran passed (the time is reported beside it, not judged: a shared
        or loaded machine is slower, and timings are for benchmarks)."""
        return all(r.passed is not False for r in self.rows)

    @property
    def within_budget(self) -> bool:
        return self.seconds <= self.budget_s

    def to_dict(self) -> dict:
        return {**asdict(self), "budget_s": self.budget_s, "passed": self.passed,
                "within_budget": self.within_budget}

    @classmethod
    def from_dict(cls, data: dict) -> "GpuCheck":
        return cls(mode=data["mode"], environment=data["environment"], seconds=data["seconds"],
                   date=data["date"], rows=tuple(CheckRow(**r) for r in data["rows"]))

    def write(self, out: Path) -> tuple[Path, Path]:
        """gpu-check.json and gpu-check.txt in `out`."""
        out.mkdir(parents=True, exist_ok=True)
        paths = out / "gpu-check.json", out / "gpu-check.txt"
        paths[0].write_text(json.dumps(self.to_dict(), indent=1, default=str))
        paths[1].write_text(self.table() + "\n")
        return paths

    def table(self) -> str:
        """The summary a person reads: environment, then one line per check with its figures."""
        env = self.environment
        gpus = ", ".join(env.get("gpu_names", [])) or "none"
        lines = [f"dpviz gpu-check ({self.mode}), {self.date}: "
                 f"{'PASSED' if self.passed else 'FAILED'} in {self.seconds:.0f} s "
                 f"({'within' if self.within_budget else 'OVER'} its budget of {self.budget_s:.0f} s)",
                 f"torch {env.get('torch')}, CUDA {env.get('cuda')}, NCCL {env.get('nccl')}, "
                 f"Python {env.get('python')}; {env.get('gpu_count', 0)} GPU(s): {gpus}; "
                 f"{env.get('cpus')} CPUs, load {env.get('load')}"]
        width = max(len(r.name) for r in self.rows) if self.rows else 0
        for r in self.rows:
            verdict = {True: "pass", False: "FAIL", None: "skip"}[r.passed]
            figures = ", ".join(f"{k} {_fmt(v)}" for k, v in r.figures.items())
            took = f"{r.seconds:5.1f} s" if r.seconds else " " * 7
            lines.append(f"{verdict:4}  {r.name:{width}}  {took}  {figures}")
            if r.note:
                lines.append(f"{'':4}  {'':{width}}           {r.note}")
        return "\n".join(lines)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}"
    return str(value)


def nccl_kernels(record: RunRecord) -> int:
    """GPU spans of NCCL kernels, either name generation."""
    return sum(s.name.startswith(NCCL_KERNEL_PREFIXES) for s in record.spans)


def gpu_spans(record: RunRecord) -> int:
    """Spans on a GPU stream: kernels, memory copies and sets."""
    return sum(s.tid.startswith(GPU_TID_PREFIX) for s in record.spans)


def run_rows(label: str, record: RunRecord, gpu: bool) -> list[CheckRow]:
    """What a run must show: DDP equals one process on the concatenated batch (bit-equal across
    ranks; within the float32 re-ordering bound of `dpviz.core.rounding` against one process, which
    holds for GPU kernels as for CPU ones: it bounds any order of the same additions, and a
    fused multiply-add rounds once where two operations round twice; TF32 would not be float32,
    so the check records that it is off), then its trace: on a GPU, kernels on CUDA streams,
    NCCL kernels where NCCL has a peer to talk to (a 1-rank communicator all-reduces in place,
    no kernel), and comm/compute overlap measured on the timeline the spans come from."""
    across = max(c.max_diff_across_ranks for c in record.checks)
    single = max(c.max_diff_vs_single_process for c in record.checks)
    bound = min((c.rounding_bound for c in record.checks if c.rounding_bound is not None), default=None)
    worst = max((c.max_diff_vs_single_process / c.rounding_bound for c in record.checks
                 if c.rounding_bound), default=math.inf)
    equal = CheckRow(f"{label}: DDP = one process", bool(record.checks) and across == 0 and worst <= 1,
                     dict(across_ranks=across, vs_one_process=single, bound_step0=bound,
                          worst_diff_over_bound=worst, steps=len(record.checks)),
                     "across ranks exact by construction; vs one process within the float32 "
                     "re-ordering bound (dpviz.core.rounding)")
    comm = sum(s.kind in COMM_KINDS for s in record.spans)
    overlap = comm_compute_overlap(record, 0)
    figures = dict(ranks=record.world_size, comm_spans=comm,
                   overlap=overlap if overlap is not None else "no communication")
    if gpu:
        kernels, nccl = gpu_spans(record), nccl_kernels(record)
        backend = record.config.get("backend")
        needs_nccl = backend == "nccl" and record.world_size > 1
        figures = dict(gpu_spans=kernels, nccl_kernels=nccl, **figures)
        ok = kernels > 0 and (nccl > 0 or not needs_nccl) and comm > 0
        note = "GPU timeline: kernels from CUPTI" + (
            "; gloo's all-reduces on its CPU threads, copies to and from the GPU inside" if backend == "gloo"
            else "" if needs_nccl else "; one NCCL rank all-reduces in place, so no NCCL kernel is required")
    else:
        ok, note = comm > 0, "CPU timeline: gloo's all-reduces on its worker threads"
    return [equal, CheckRow(f"{label}: trace", ok, figures, note)]


def anatomy_row(label: str, record: RunRecord, gpu: bool, rank: int = 0) -> CheckRow:
    """The last step of `rank`, phase by phase: wall time each phase's spans cover (on a GPU
    its kernels' times, from CUPTI; on CPU its ops'), communication, and what of it nothing
    hid. Passes when forward, backward and optimizer each took time inside the step."""
    step = record.steps[-1]
    mine = [s for s in record.spans if s.rank == rank and s.step == step]
    cover = lambda kinds: length([(s.start_us, s.end_us) for s in mine if s.kind in kinds]) / 1e3
    phases = {k: cover((k,)) for k in ("forward", "backward", "optimizer")}
    summary = summarize_step(list(record.spans), rank, step)
    compute = [(s.start_us, s.end_us) for s in mine if s.kind in COMPUTE_KINDS]
    comm = [(s.start_us, s.end_us) for s in mine if s.kind in COMM_KINDS]
    figures = {f"{k}_ms": v for k, v in phases.items()}
    figures.update(step_ms=summary.step_ms, comm_ms=length(comm) / 1e3,
                   comm_hidden_ms=intersection(comm, compute) / 1e3,
                   exposed_comm_ms=summary.exposed_comm_ms, idle_ms=summary.idle_ms)
    return CheckRow(f"{label}: step anatomy", all(v > 0 for v in phases.values()), figures,
                    f"step {step}, rank {rank}, " + ("GPU kernel times (CUPTI)" if gpu else "CPU op times"))


def checkpointing_row(predicted: dict[int, int], measured: dict[int, int], source: str) -> CheckRow:
    """Peak activation bytes per k against the √n model (`dpviz.checkpointing_records`)."""
    ratios = {k: measured[k] / predicted[k] for k in sorted(measured)}
    ok = all(abs(r - 1) <= PEAK_TOLERANCE for r in ratios.values())
    mb = lambda b: round(b / 2 ** 20, 1)
    return CheckRow(f"checkpointing peak ({source})", ok,
                    dict(predicted_mb={k: mb(v) for k, v in sorted(predicted.items())},
                         measured_mb={k: mb(v) for k, v in sorted(measured.items())},
                         measured_over_model={k: round(r, 3) for k, r in ratios.items()}),
                    f"per k (checkpoint every k blocks), within {PEAK_TOLERANCE:.0%} of the model")

"""Why raw-loopback timings mislead, measured: the record of the pinned-cores experiment.

On a CPU, gloo adds the buffers of an all-reduce on the same cores that run backward.
`dpviz.lessons.cpu_sharing.live` runs the same DDP workload on raw loopback with the ranks pinned to
cores (`os.sched_setaffinity`, every thread of each rank): one rank alone on core 0 (no peer,
nothing to reduce), two ranks on a core each, and two ranks sharing core 0. This module holds
what that measured and reads it (no torch).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from dpviz.core.record import record_kind

ALONE, OWN_CORES, SHARED_CORE = "1 rank, core 0", "2 ranks, core r each", "2 ranks, both on core 0"


@dataclass(frozen=True)
class PinnedRow:
    """One setting, repeated: medians of each repeat's steady steps over its ranks (ms)."""

    setting: str
    world_size: int
    cores: tuple[tuple[int, ...], ...]   # the cores each rank's threads were pinned to, as applied
    backward_ms: tuple[float, ...]       # one median per repeat
    step_ms: tuple[float, ...]

    @property
    def median_backward_ms(self) -> float:
        return statistics.median(self.backward_ms)


@record_kind("cpu_sharing")
@dataclass(frozen=True)
class CpuSharing:
    config: dict                  # the workload (RunConfig.to_dict of the 2-rank runs)
    rows: tuple[PinnedRow, ...]   # ALONE, OWN_CORES, SHARED_CORE
    cpu_count: int

    def row(self, setting: str) -> PinnedRow:
        for r in self.rows:
            if r.setting == setting:
                return r
        raise KeyError(f"no row {setting!r}; rows: {[r.setting for r in self.rows]}")


def orderings_held(record: CpuSharing) -> int:
    """Repeats in which backward ran slowest with both ranks on one core, then with a core
    each, fastest alone: alone < own cores < shared core (repeats are taken in turn)."""
    rows = [record.row(s).backward_ms for s in (ALONE, OWN_CORES, SHARED_CORE)]
    return sum(a < b < c for a, b, c in zip(*rows))


def describe_cpu_pinning(record: CpuSharing) -> str:
    """The measured explanation of raw loopback's timings, as a table and verdicts from the
    runs; where the repeats disagree (load), it says so instead of concluding."""
    alone = record.row(ALONE).median_backward_ms
    repeats = len(record.rows[0].backward_ms)
    lines = [f"{'raw loopback, pinned':26} {'cores per rank':>16} {'backward ms':>12} {'× alone':>8} "
             f"{'step ms':>8}   medians of {repeats} runs"]
    for r in record.rows:
        cores = " | ".join(",".join(map(str, c)) for c in r.cores)
        lines.append(f"{r.setting:26} {cores:>16} {r.median_backward_ms:>12.1f} "
                     f"{r.median_backward_ms / alone:>8.2f} {statistics.median(r.step_ms):>8.1f}")
    own, shared = record.row(OWN_CORES), record.row(SHARED_CORE)
    held = orderings_held(record)
    lines.append(f"alone < core each < one shared core held in {held} of {repeats} repeats"
                 + ("" if held == repeats else " — the machine's load moves these numbers more than "
                    "the effect in the others: read the medians with that in mind"))
    lines.append(f"with a core each, backward ran {own.median_backward_ms / alone:.2f}× as long as one rank "
                 f"alone: beside it on its core ran its own gloo all-reduce (alone there is no peer, nothing "
                 f"to reduce); the two processes also share caches and memory bandwidth, not separated here")
    lines.append(f"on one shared core, {shared.median_backward_ms / alone:.2f}×: two backwards and both "
                 f"ranks' all-reduces take turns on one core — what raw loopback timings mix into 'communication'")
    return "\n".join(lines)

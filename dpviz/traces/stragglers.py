"""Cross-rank analysis: the same collective on every rank, who arrived late, who waited.

A collective completes on no rank before every rank has entered it, so on a common clock
(live runs; loaded traces of one machine or with `baseTimeNanoseconds`) a collective
instance tells, per rank, how long it waited for the others (from its own arrival to the
last rank's) and how long the data then moved (from the last arrival to its own end).
The rank that keeps arriving last is the straggler: the others wait in its collectives.

Instances are matched per process group in issue order: the n-th collective of a step in
one group on one rank is the n-th of that group on every other. NCCL kernels name their group
(`Process Group Name`, PyTorch ≥ 2.3); gloo's spans do not, so a gloo trace is taken as one
group (DDP's default group is). The ops must agree, else it is an error that says so.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..record import RunRecord, Span
from ..trace import COMM_KINDS


class MatchError(ValueError):
    """Ranks whose collectives do not line up (different jobs, or several process groups)."""


@dataclass(frozen=True)
class CollectiveInstance:
    """One collective as every rank ran it, in ms from its step's start on the first rank."""

    step: int
    index: int                       # issue order within the step (and group)
    op: str | None
    group: str | None                # process group, when the trace names it
    bytes: int | None
    arrive_ms: dict[int, float]      # rank → when it entered the collective
    wait_ms: dict[int, float]        # rank → waiting for the last rank to arrive
    move_ms: dict[int, float]        # rank → from the last arrival to its own end

    @property
    def skew_ms(self) -> float:
        """First to last rank entering it."""
        return max(self.arrive_ms.values()) - min(self.arrive_ms.values())

    @property
    def last_rank(self) -> int:
        return max(self.arrive_ms, key=self.arrive_ms.get)


@dataclass(frozen=True)
class StepStragglers:
    """Ranks of one step, latest first: `late_ms` sums how far behind the first rank each
    arrived, over the step's collectives; `waited_ms` sums what each spent waiting."""

    step: int
    ranking: tuple[int, ...]
    late_ms: dict[int, float]
    waited_ms: dict[int, float]

    @property
    def straggler(self) -> int:
        return self.ranking[0]


def collective_instances(record: RunRecord) -> list[CollectiveInstance]:
    """Every collective of every step, matched across the record's ranks."""
    by_key: dict[tuple, list[Span]] = defaultdict(list)
    for s in record.spans:
        if s.kind in COMM_KINDS and s.step is not None:
            by_key[(s.rank, s.step, s.group or "")].append(s)
    ranks = sorted({s.rank for s in record.spans})
    groups = sorted({group for _, _, group in by_key})
    out = []
    for step in record.steps:
        t0 = min((s.start_us for s in record.spans if s.kind == "step" and s.step == step),
                 default=0.0)
        for group in groups:
            out += _match(step, group or None, t0,
                          {r: sorted(by_key.get((r, step, group), []), key=lambda s: s.start_us)
                           for r in ranks})
    return sorted(out, key=lambda c: (c.step, min(c.arrive_ms.values())))


def _match(step: int, group: str | None, t0: float, lists: dict[int, list[Span]]
           ) -> list[CollectiveInstance]:
    """One step's collectives of one group, the n-th of every rank together (a group's
    ranks are those with any of its collectives in the step: a subgroup leaves others out)."""
    lists = {r: v for r, v in lists.items() if v}
    counts = {r: len(v) for r, v in lists.items()}
    where = f"step {step}" + (f", process group {group}" if group else "")
    if len(set(counts.values())) > 1:
        raise MatchError(f"{where}: ranks ran different numbers of collectives {counts}: "
                         "not one job, or process groups the trace does not name")
    ranks, out = sorted(lists), []
    for index, spans in enumerate(zip(*(lists[r] for r in ranks))):
        ops = {s.op for s in spans}
        if len(ops) > 1:
            raise MatchError(f"{where}, collective {index}: ranks ran different ops {ops}")
        last = max(s.start_us for s in spans)
        out.append(CollectiveInstance(
                step=step, index=index, op=spans[0].op, group=group, bytes=spans[0].bytes,
                arrive_ms={r: (s.start_us - t0) / 1e3 for r, s in zip(ranks, spans)},
                wait_ms={r: (last - s.start_us) / 1e3 for r, s in zip(ranks, spans)},
                move_ms={r: max(0.0, s.end_us - last) / 1e3 for r, s in zip(ranks, spans)}))
    return out


def straggler_ranking(record: RunRecord) -> list[StepStragglers]:
    """Per step, ranks ordered by how late they arrived at its collectives (latest first)."""
    instances = collective_instances(record)
    out = []
    for step in record.steps:
        mine = [c for c in instances if c.step == step]
        if not mine:
            continue
        ranks = sorted({r for c in mine for r in c.arrive_ms})
        late = {r: sum(c.arrive_ms[r] - min(c.arrive_ms.values()) for c in mine if r in c.arrive_ms)
                for r in ranks}
        waited = {r: sum(c.wait_ms.get(r, 0.0) for c in mine) for r in ranks}
        out.append(StepStragglers(step=step, ranking=tuple(sorted(ranks, key=lambda r: -late[r])),
                                  late_ms=late, waited_ms=waited))
    return out

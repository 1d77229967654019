"""Cross-rank analysis: the same collective on every rank, who arrived late, who waited.

A collective completes on no rank before every rank has entered it, so on a common clock
(live runs; loaded traces of one machine or with `baseTimeNanoseconds`) a collective
instance tells, per rank, how long it waited for the others (from its own arrival to the
last rank's) and how long the data then moved (from the last arrival to its own end).
The rank that keeps arriving last is the straggler: the others wait in its collectives.

Matching follows that physics. Collectives are grouped per communicator: the process group
the trace names (on NCCL kernels since PyTorch 2.3, or on the record_param_comms op that
launched them), else the GPU stream a communicator's kernels run on, else one group (gloo:
DDP's default group). Within a group, where every collective carries its sequence number
(`Seq`, newer PyTorch), one number on every rank is one instance; otherwise each rank's
collectives are walked in issue order. Either way one from every rank is an instance only
when all of them run the same op and overlap in time (the last arrival before the first
end): so a rank's wait never exceeds its own kernel. A collective with no such partner on
every loaded rank — the peers of a sampled rank are not loaded, an instance fell outside
the profiled window, clocks that disagree — is reported as unmatched, never turned into a
wait.
"""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

from dpviz.analysis.overlap import COMPUTE_KINDS, length, minus, steady_steps, step_windows
from dpviz.analysis.scan import COMM_KINDS
from dpviz.core.record import RunRecord, Span


SEQUENCE = "sequence number"
ORDER = "issue order and time"


@dataclass(frozen=True)
class CollectiveInstance:
    """One collective as every rank ran it, in ms from its step's start on the first rank."""

    step: int
    index: int                       # issue order within the step (and group)
    op: str | None
    group: str | None                # communicator: process group, or the GPU stream
    bytes: int | None
    arrive_ms: dict[int, float]      # rank → when it entered the collective
    wait_ms: dict[int, float]        # rank → waiting for the last rank to arrive
    move_ms: dict[int, float]        # rank → from the last arrival to its own end
    matched_by: str = ORDER          # SEQUENCE (the trace's numbers) or ORDER (issue order and time)

    @property
    def skew_ms(self) -> float:
        """First to last rank entering it."""
        return max(self.arrive_ms.values()) - min(self.arrive_ms.values())

    @property
    def last_rank(self) -> int:
        return max(self.arrive_ms, key=self.arrive_ms.get)


@dataclass(frozen=True)
class Unmatched:
    """Collectives of one rank, step and op that no loaded peer ran at the same time."""

    rank: int
    step: int
    op: str | None
    group: str | None
    count: int


@dataclass(frozen=True)
class StepStragglers:
    """Ranks of one step, latest first: `late_ms` sums how far behind the first rank each
    arrived, over the step's matched collectives; `waited_ms` is the time each spent
    waiting in them (their wait intervals merged and cut to the rank's step window, so it
    never exceeds the rank's communication time in that step)."""

    step: int
    ranking: tuple[int, ...]
    late_ms: dict[int, float]
    waited_ms: dict[int, float]

    @property
    def straggler(self) -> int:
        return self.ranking[0]


def communicator(span: Span) -> str:
    """The group a collective runs in: its process group, else its GPU stream, else ''."""
    return span.group or (span.tid if span.tid.startswith("stream ") else "")


def match_collectives(record: RunRecord) -> tuple[list[CollectiveInstance], list[Unmatched]]:
    """Every collective matched across the record's ranks, and those that could not be."""
    matched, lost = _match(record)
    t0 = _step_starts(record)
    instances, index = [], Counter()
    for key, members, how in matched:
        step = members[0][1].step
        last = max(s.start_us for _, s in members)
        instances.append(CollectiveInstance(
            step=step, index=index[(step, key)], op=members[0][1].op, group=key or None,
            bytes=members[0][1].bytes,
            arrive_ms={r: (s.start_us - t0.get(step, 0.0)) / 1e3 for r, s in members},
            wait_ms={r: (last - s.start_us) / 1e3 for r, s in members},
            move_ms={r: (s.end_us - last) / 1e3 for r, s in members}, matched_by=how))
        index[(step, key)] += 1
    return instances, lost


Members = list[tuple[int, Span]]


def _match(record: RunRecord) -> tuple[list[tuple[str, Members, str]], list[Unmatched]]:
    """(communicator, [(rank, span), ...], how) per matched instance in time order; the rest."""
    by_key: dict[str, dict[int, list[Span]]] = defaultdict(lambda: defaultdict(list))
    for s in record.spans:
        if s.kind in COMM_KINDS and s.step is not None:
            by_key[communicator(s)][s.rank].append(s)
    ranks = sorted({s.rank for s in record.spans})
    matched: list[tuple[str, Members, str]] = []
    lost: Counter = Counter()
    for key, lists in sorted(by_key.items()):
        mine = {r: sorted(lists.get(r, []), key=lambda s: s.start_us) for r in ranks}
        how = SEQUENCE if _numbered(mine) else ORDER
        found, left = (_by_sequence if how == SEQUENCE else _walk)(mine)
        matched += [(key, m, how) for m in found]
        lost.update((s.step, s.rank, str(s.op), key) for s in left)
    matched.sort(key=lambda m: min(s.start_us for _, s in m[1]))
    return matched, [Unmatched(rank=r, step=step, op=None if op == "None" else op,
                               group=key or None, count=n)
                     for (step, r, op, key), n in sorted(lost.items())]


def _step_starts(record: RunRecord) -> dict[int, float]:
    """step → its earliest start over ranks (instances are timed from it)."""
    t0: dict[int, float] = {}
    for s in record.spans:
        if s.kind == "step" and s.step is not None:
            t0[s.step] = min(t0.get(s.step, s.start_us), s.start_us)
    return t0


def _numbered(lists: dict[int, list[Span]]) -> bool:
    """Whether every collective of a communicator carries a sequence number, each once per
    rank (one number, one collective), on at least two ranks."""
    return (sum(bool(v) for v in lists.values()) >= 2
            and all(s.seq is not None for v in lists.values() for s in v)
            and all(len({s.seq for s in v}) == len(v) for v in lists.values()))


def _possible(heads: Members) -> bool:
    """One collective on every rank can be one instance: the same op, and the last rank
    arrives before the first one's kernel ends (else one rank would wait longer than its
    own collective ran)."""
    return (max(s.start_us for _, s in heads) <= min(s.end_us for _, s in heads)
            and len({s.op for _, s in heads}) == 1)


def _by_sequence(lists: dict[int, list[Span]]) -> tuple[list[Members], list[Span]]:
    """Match one communicator's collectives across ranks by sequence number: a number every
    rank ran is one instance if it is possible (`_possible`); every other collective is
    unmatched. Linear in collectives."""
    ranks = sorted(lists)
    numbered = {r: {s.seq: s for s in lists[r]} for r in ranks}
    common = set.intersection(*(set(v) for v in numbered.values()))
    found: list[Members] = []
    left = [s for r in ranks for s in lists[r] if s.seq not in common]
    for seq in sorted(common):
        heads = [(r, numbered[r][seq]) for r in ranks]
        if _possible(heads):
            found.append(heads)
        else:
            left += [s for _, s in heads]
    return found, left


def _walk(lists: dict[int, list[Span]]) -> tuple[list[Members], list[Span]]:
    """Match one communicator's collectives across ranks in issue order.

    At each turn, look at every rank's next collective. If they all run the same op and
    overlap in time (latest start ≤ earliest end), they are one instance. Otherwise the one
    that ends first has no partner on some rank (every later collective there starts after
    it ends, or runs another op): it is unmatched. Linear in collectives.
    """
    ranks = sorted(lists)
    pos = dict.fromkeys(ranks, 0)
    found: list[list[tuple[int, Span]]] = []
    left: list[Span] = []
    if len(ranks) < 2:
        return found, [s for v in lists.values() for s in v]
    while all(pos[r] < len(lists[r]) for r in ranks):
        heads = [(r, lists[r][pos[r]]) for r in ranks]
        first_end = min(heads, key=lambda h: h[1].end_us)
        if _possible(heads):
            found.append(heads)
            for r in ranks:
                pos[r] += 1
        else:
            left.append(first_end[1])
            pos[first_end[0]] += 1
    left += [s for r in ranks for s in lists[r][pos[r]:]]
    return found, left


def collective_instances(record: RunRecord) -> list[CollectiveInstance]:
    """Every collective matched across the record's ranks (see `match_collectives`)."""
    return match_collectives(record)[0]


def straggler_ranking(record: RunRecord) -> list[StepStragglers]:
    """Per step, ranks ordered by how late they arrived at its collectives (latest first)."""
    matched, _ = _match(record)
    waits = _peer_waits(record, matched)
    late: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for _, members, _ in matched:
        step = members[0][1].step
        first = min(s.start_us for _, s in members)
        for r, s in members:
            late[step][r] += (s.start_us - first) / 1e3
    out = []
    for step in record.steps:
        if step not in late:
            continue
        ranks = sorted(late[step])
        waited = {r: length(waits[(r, step)]) / 1e3 for r in ranks}
        out.append(StepStragglers(step=step, ranking=tuple(sorted(ranks, key=lambda r: -late[step][r])),
                                  late_ms=dict(late[step]), waited_ms=waited))
    return out


Intervals = list[tuple[float, float]]


def _by_rank(record: RunRecord) -> dict[int, list[Span]]:
    out: dict[int, list[Span]] = defaultdict(list)
    for s in record.spans:
        out[s.rank].append(s)
    return out


def _peer_waits(record: RunRecord, matched: list[tuple[str, Members, str]]
                ) -> dict[tuple[int, int], Intervals]:
    """(rank, step) → when the rank sat in a matched collective before the last rank joined
    it (its own arrival to the last arrival), cut to each of the rank's step windows (µs)."""
    windows = {r: step_windows(v) for r, v in _by_rank(record).items()}
    waits: dict[tuple[int, int], Intervals] = defaultdict(list)
    for _, members, _ in matched:
        last = max(s.start_us for _, s in members)
        for r, s in members:
            for win_step, (a, b) in windows[r].items():
                lo, hi = max(a, s.start_us), min(b, last)
                if hi > lo:
                    waits[(r, win_step)].append((lo, hi))
    return waits


@dataclass(frozen=True)
class ExposedSplit:
    """One rank's exposed communication in one step (ms), split by what it waited for.

    `peer_wait_ms`: exposed while the rank sat in a collective some peer had not yet joined
    (a slower peer, not the link, held it: no wire or reduction can start before the last
    rank arrives). `link_wait_ms`: the rest — the emulated link's transfer, and the
    collective after every rank had joined (data moving, the reduction). They add up to
    `exposed_ms`, which equals `overlap.summarize`'s `exposed_comm_ms` for the same step."""

    rank: int
    step: int
    exposed_ms: float
    peer_wait_ms: float
    link_wait_ms: float


def exposed_split(record: RunRecord, steps: list[int] | None = None) -> list[ExposedSplit]:
    """Every (rank, step)'s exposed communication split into peer wait and link wait.

    Exposed is communication (collectives and link transfers) with nothing computing beside
    it, inside the step's window, as `overlap.summarize` counts it; its peer-wait part is
    where it meets the rank's waits for late peers (`match_collectives`' wait intervals)."""
    matched, _ = _match(record)
    waits = _peer_waits(record, matched)
    chosen = set(record.steps if steps is None else steps)
    out = []
    for rank, mine in sorted(_by_rank(record).items()):
        for step, (a, b) in sorted(step_windows(mine).items()):
            if step not in chosen:
                continue
            exposed = _exposed(mine, a, b)
            peer = length(exposed) - length(minus(exposed, waits[(rank, step)]))
            out.append(ExposedSplit(rank=rank, step=step, exposed_ms=length(exposed) / 1e3,
                                    peer_wait_ms=peer / 1e3, link_wait_ms=(length(exposed) - peer) / 1e3))
    return out


def _exposed(spans: list[Span], a: float, b: float) -> Intervals:
    """Within the window [a, b): communication (collectives, link transfers) while nothing
    computes."""
    def cut(kinds) -> Intervals:
        return [(max(a, s.start_us), min(b, s.end_us)) for s in spans
                if s.kind in kinds and s.step is not None and s.start_us < b and s.end_us > a]
    return minus(cut((*COMM_KINDS, "link")), cut(COMPUTE_KINDS))


@dataclass(frozen=True)
class SplitMedians:
    """Medians over records' ranks and analysed steps (ms): exposed communication and its two
    parts (each part's own median: they need not add up to the exposed median)."""

    exposed_ms: float
    peer_wait_ms: float
    link_wait_ms: float
    samples: int


def split_medians(*records: RunRecord) -> SplitMedians:
    """`exposed_split` over the records' analysed steps (`overlap.steady_steps`), as medians."""
    rows = [s for record in records for s in exposed_split(record, steady_steps(record))]
    if not rows:
        raise ValueError("no analysed steps to split: record with profile=True and steps >= 3")
    med = statistics.median
    return SplitMedians(med([r.exposed_ms for r in rows]), med([r.peer_wait_ms for r in rows]),
                        med([r.link_wait_ms for r in rows]), len(rows))


def link_wait_ms(record: RunRecord) -> float:
    """One run's link wait: the median over its ranks and analysed steps (a timing verdict's
    quantity for the link lessons: a slower peer's share of exposed time left out)."""
    return split_medians(record).link_wait_ms


def describe_beside_backward(record: RunRecord) -> str:
    """Whether communication ran beside backward on this run, counted per rank and analysed
    step (some transfer or all-reduce overlapping that rank's backward: `overlapped_ms`), then
    what stayed exposed, split into link wait and peer wait (`split_medians`): where ranks
    share cores, a rank waits for a slower one, and that is no part of the link's time."""
    from dpviz.analysis.overlap import summarize

    rows = summarize(record, steady_steps(record))
    if not rows:
        raise ValueError("no analysed steps: record with profile=True and steps >= 3")
    beside = [r for r in rows if r.overlapped_ms > 0]
    split = split_medians(record)
    if len(beside) * 2 > len(rows):
        head = (f"communication ran beside backward in {len(beside)} of {len(rows)} rank-steps (median "
                f"{statistics.median(r.overlapped_ms for r in beside):.1f} ms of it while backward ran)")
    else:
        head = (f"communication ran beside backward in only {len(beside)} of {len(rows)} rank-steps, not in "
                "most: this run does not show buckets starting while backward is still running")
    return (f"{head}; exposed communication {split.exposed_ms:.1f} ms a rank-step (median), of it link "
            f"wait {split.link_wait_ms:.1f} ms and peer wait {split.peer_wait_ms:.1f} ms (waiting for a "
            "slower rank; medians, each on its own)")

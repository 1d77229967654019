"""Cross-rank analysis: collectives matched across ranks, waits, and a live straggler."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpviz.analysis.stragglers import (
    ORDER, SEQUENCE, collective_instances, match_collectives, straggler_ranking,
)
from dpviz.analysis.trace_files import load_trace
from dpviz.app.cli import main as cli
from dpviz.core.config import RunConfig

DATA = Path(__file__).parent / "data"
GLOO2 = sorted((DATA / "dpviz-gloo-2rank").glob("rank-*.json.gz"))


def test_loaded_ranks_match_collective_by_collective():
    record = load_trace(GLOO2)
    instances = collective_instances(record)
    assert instances and all(set(c.arrive_ms) == {0, 1} for c in instances)
    for c in instances:
        # the last rank to arrive waits for nobody; the others wait exactly the gap to it
        assert c.wait_ms[c.last_rank] == 0
        assert max(c.wait_ms.values()) == pytest.approx(c.skew_ms, abs=1e-9)  # same subtraction
        assert all(v >= 0 for v in c.move_ms.values())
    assert [s.step for s in straggler_ranking(record)] == record.steps


@pytest.mark.parametrize("changes", [dict(slow_rank=2), dict(slow_rank=-1, delay_ms=5),
                                     dict(delay_ms=5.0), dict(slow_rank=0, delay_ms=0),
                                     dict(slow_rank=1, delay_ms=20_000)])
def test_bad_straggler_knobs_fail_before_spawn(changes):
    with pytest.raises(ValueError, match="slow_rank|delay_ms"):
        RunConfig().replace(**changes)


def test_live_slow_rank_is_the_straggler_and_the_others_wait_for_it(tmp_path, capsys):
    """Rank 1 sleeps 100 ms in every forward; rank 0 then waits in each step's all-reduces.
    Rank 0's wait is the delay give or take the two ranks' forward/backward difference and
    scheduling noise (tens of ms when the cores are oversubscribed): half the delay is a safe
    floor."""
    delay = 100.0
    assert cli(["run", "--ranks", "2", "--steps", "3", "--slow-rank", "1", "--delay-ms", str(delay),
                "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "summary.json").read_text())
    assert [s["straggler"] for s in data["stragglers"]] == [1, 1, 1]
    for s in data["stragglers"]:
        assert s["waited_ms"]["0"] > delay / 2 > s["waited_ms"]["1"]
    from dpviz.core.record import load
    record = load(tmp_path / "record.json")
    # with several buckets (the CLI's default cap splits the model) rank 0 waits at the step's
    # first all-reduce; rank 1 then arrives at the later ones about when rank 0 does
    by_step: dict[int, list] = {}
    for c in collective_instances(record):
        if c.op == "all_reduce":
            by_step.setdefault(c.step, []).append(c)
    assert sorted(by_step) == sorted(record.steps)[-len(by_step):] and by_step
    for instances in by_step.values():
        longest = max(instances, key=lambda c: c.wait_ms[0])
        assert longest.last_rank == 1 and longest.wait_ms[0] > delay / 2


def _record(spans_by_rank: dict[int, list[tuple]], steps=((0, 0, 1000),)) -> "RunRecord":
    """Ranks' collectives as (start µs, end µs, op, communicator[, sequence number]) on
    stream sub-lanes."""
    from dpviz.core.record import RunRecord, Span

    spans = [Span(rank=r, tid="m", name=f"ProfilerStep#{n}", kind="step", start_us=a, end_us=b, step=n)
             for r in spans_by_rank for n, a, b in steps]
    for rank, comms in spans_by_rank.items():
        for start, end, op, group, *seq in comms:
            step = next(n for n, a, b in steps if a <= start < b)
            spans.append(Span(rank=rank, tid=f"stream {group}", name=op, kind="collective",
                              start_us=start, end_us=end, step=step, op=op, seq=(seq or [None])[0]))
    return RunRecord(config={}, world_size=len(spans_by_rank), spans=tuple(spans), buckets=(),
                     micro_steps=(), losses={}, checks=(), ddp_logging={})


def _check_physics(record):
    """No rank waits longer than its own collective, nor, per step, than its communication."""
    from dpviz.analysis.overlap import summarize

    for c in collective_instances(record):
        for r in c.wait_ms:
            assert 0 <= c.wait_ms[r] and c.move_ms[r] >= 0   # last arrival before its end
    comm = {(row.rank, row.step): row.comm_ms for row in summarize(record)}
    for s in straggler_ranking(record):
        for r, waited in s.waited_ms.items():
            assert waited <= comm[(r, s.step)] + 1e-9, (s.step, r, waited, comm[(r, s.step)])


def test_two_communicators_interleaved_differently_are_matched_per_stream():
    """Rank 0 runs the all-gather (stream 7) before the all-to-all (stream 9), rank 1 the
    other way round: matched per communicator, each pairs with its own op."""
    record = _record({0: [(10, 50, "all_gather", 7), (60, 90, "all_to_all", 9)],
                      1: [(5, 90, "all_to_all", 9), (40, 50, "all_gather", 7)]})
    by_op = {c.op: c for c in collective_instances(record)}
    assert {c.group for c in by_op.values()} == {"stream 7", "stream 9"}
    assert by_op["all_gather"].wait_ms == pytest.approx({0: 0.030, 1: 0.0}, abs=1e-12)
    assert by_op["all_to_all"].last_rank == 0
    assert match_collectives(record)[1] == []
    _check_physics(record)


def test_a_sampled_rank_keeps_its_unpartnered_collectives_unmatched_not_shifted():
    """Rank 0's first all-to-all has no partner among the loaded ranks (its peers were not
    loaded): pairing in issue order would pair it with rank 1's first and shift every pair
    after it; matched by time, the true pairs end together and the extra one is unmatched."""
    record = _record({0: [(100, 300, "all_to_all", 84), (310, 900, "all_to_all", 84),
                          (950, 990, "all_reduce", 84)],
                      1: [(500, 900, "all_to_all", 84), (960, 990, "all_reduce", 84)]})
    instances, unmatched = match_collectives(record)
    assert [(c.op, c.wait_ms[0], c.wait_ms[1]) for c in instances] == [
        ("all_to_all", pytest.approx(0.19), 0.0), ("all_reduce", pytest.approx(0.01), 0.0)]
    assert [(u.rank, u.op, u.count) for u in unmatched] == [(0, "all_to_all", 1)]
    _check_physics(record)


def test_a_missing_instance_and_a_different_op_are_unmatched():
    record = _record({0: [(10, 20, "all_reduce", 1), (30, 40, "all_reduce", 1), (50, 60, "broadcast", 1)],
                      1: [(12, 20, "all_reduce", 1), (50, 60, "all_gather", 1)]})
    instances, unmatched = match_collectives(record)
    assert [c.op for c in instances] == ["all_reduce"]
    assert sorted((u.rank, u.op) for u in unmatched) == [(0, "all_reduce"), (0, "broadcast"), (1, "all_gather")]


def test_sequence_numbers_pair_what_issue_order_and_time_would_pair_wrong():
    """Rank 1's first all-reduce ran before profiling started: in issue order rank 0's first
    (seq 5) overlaps rank 1's only one (seq 6) and would pair with it; the numbers pair 6
    with 6, and 5 has no partner."""
    comms = {0: [(0, 100, "all_reduce", 3, 5), (100, 200, "all_reduce", 3, 6)],
             1: [(50, 200, "all_reduce", 3, 6)]}
    instances, unmatched = match_collectives(_record(comms))
    (c,) = instances
    assert c.matched_by == SEQUENCE and c.wait_ms == pytest.approx({0: 0.0, 1: 0.05})
    assert [(u.rank, u.count) for u in unmatched] == [(0, 1)]
    unnumbered = {r: [x[:4] for x in v] for r, v in comms.items()}
    (by_order,), _ = match_collectives(_record(unnumbered))
    assert by_order.matched_by == ORDER and by_order.wait_ms[0] == pytest.approx(0.05)
    _check_physics(_record(comms))


def test_a_numbered_pair_that_cannot_have_happened_is_unmatched():
    """Seq 7 on both ranks but rank 1 starts after rank 0 ended (clocks that disagree): no
    wait longer than a kernel is made up; it is unmatched."""
    instances, unmatched = match_collectives(_record({0: [(0, 100, "all_reduce", 3, 7)],
                                                      1: [(150, 300, "all_reduce", 3, 7)]}))
    assert instances == [] and sorted(u.rank for u in unmatched) == [0, 1]


def test_process_group_and_sequence_number_come_from_record_param_comms(tmp_path):
    """Kernels that do not carry their process group (older kineto) take it, and the
    sequence number, from the record_param_comms op that launched them; rank 1's trace
    lacks seq 41 (its profiler started later): pairs by number, 41 unmatched."""
    from handmade_traces import Rank

    paths = []
    for rank, calls in ((0, ((41, 100), (42, 400))), (1, ((42, 400),))):
        r = Rank(rank).step(1, 0, 1000).step(2, 1000, 1000)
        for seq, t in calls:
            r.cpu("c10d::allreduce_", t, 50)
            r.cpu("record_param_comms", t + 2, 40, **{"Collective name": "allreduce", "Seq": seq,
                                                      "Process Group Name": "7",
                                                      "Process Group Ranks": [0, 1]})
            r.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 100 + 50 * rank, 150,
                     stream=20, launch=t + 10)
        paths.append(r.write(tmp_path / f"rank{rank}.json.gz"))
    record = load_trace(paths)
    kernels = [s for s in record.spans if s.tid == "stream 20"]
    assert {(s.rank, s.group, s.seq) for s in kernels} == {(0, "7", 41), (0, "7", 42), (1, "7", 42)}
    instances, unmatched = match_collectives(record)
    assert [(c.group, c.matched_by) for c in instances] == [("7", SEQUENCE)]
    assert [(u.rank, u.group, u.count) for u in unmatched] == [(0, "7", 1)]
    _check_physics(record)


def test_real_sampled_ranks_obey_the_physics():
    """Two sampled ranks of a 128-rank job (tests/data/nccl-sampled-ranks): what pairs has
    kernels ending within a few µs of each other; what has no partner is unmatched."""
    record = load_trace(sorted((DATA / "nccl-sampled-ranks").glob("*.json.gz")))
    instances, unmatched = match_collectives(record)
    assert len(instances) == 5 and sum(u.count for u in unmatched) == 10
    assert {c.matched_by for c in instances} == {ORDER}   # its PyTorch wrote no sequence numbers
    for c in instances:   # one instance ends on all ranks at about the same moment
        ends = [c.arrive_ms[r] + c.wait_ms[r] + c.move_ms[r] for r in c.arrive_ms]
        assert max(ends) - min(ends) < 0.5
    _check_physics(record)


def test_a_real_traces_process_group_is_read_from_it():
    """The A100 trace's NCCL kernels and record_param_comms name process group '0' (no
    sequence numbers): its collectives are grouped by that name, not by their stream."""
    record = load_trace(DATA / "nccl-a100-ddp")
    comm = [s for s in record.spans if s.kind in ("allreduce", "collective")]
    assert comm and {s.group for s in comm} == {"0"} and {s.seq for s in comm} == {None}


def test_live_exposed_split_puts_a_slow_peer_in_peer_wait_and_the_wire_in_link_wait():
    """Rank 1 sleeps 100 ms in every forward; one bucket, crossing a 1 Gb/s link after backward.
    Rank 0 reaches its all-reduce first and sits in it until rank 1 joins: its exposed peer
    wait is rank 1's arrival minus its own, i.e. the sleep plus how the two ranks differ in
    everything else before the collective: step start, forward+backward without the sleep,
    the link's transfer and the rest (batch, hand-offs between threads). Those differences
    are read from the record, so the tolerance is their sum plus 0.5 ms (the µs rounding of
    the dozen span ends involved: 12 × 0.5 µs; the rest is margin).
    Rank 1, last to arrive, waits for nobody; on both ranks the link transfer is link wait
    where nothing computes beside it: it starts when the bucket is ready, as the last gradient
    hook fires, so its first µs overlap the end of the backward span (54 µs to 1.7 ms measured
    beside a busy process) and only the rest is exposed. The two parts add up to summarize's
    exposed time.
    A step whose all-reduce the matcher could not pair across ranks (seen in one of about
    twenty fresh runs on a loaded machine) has no peer wait to check: only matched steps are
    held to it, and at least one must be."""
    from dpviz.analysis.overlap import steady_steps, summarize, union
    from dpviz.analysis.stragglers import exposed_split
    from dpviz.core.bucket_layout import ONE_BUCKET_CAP_MB
    from dpviz.core.link import Link
    from dpviz.engine.ddp_run import run

    delay = 100.0
    record = run(RunConfig(world_size=2, steps=4, slow_rank=1, delay_ms=delay, checks=False,
                           bucket_cap_mb=ONE_BUCKET_CAP_MB, link=Link(gbps=1.0, latency_us=100.0)))
    matched = {c.step for c in collective_instances(record) if c.op == "all_reduce"}
    steps = [step for step in steady_steps(record) if step in matched]
    assert steps, "no analysed step's all-reduce was matched across the ranks"
    split = {(s.rank, s.step): s for s in exposed_split(record, steps)}
    exposed = {(r.rank, r.step): r.exposed_comm_ms for r in summarize(record, steps)}
    for key, s in split.items():
        assert s.peer_wait_ms + s.link_wait_ms == pytest.approx(s.exposed_ms, abs=1e-9)
        assert s.exposed_ms == pytest.approx(exposed[key], abs=1e-6)   # the same intervals
    for step in steps:
        t = {r: _before_collective(record, r, step) for r in (0, 1)}
        slack = sum(abs(t[1][part] - t[0][part]) for part in ("start", "other", "link")) \
            + abs(t[1]["compute"] - delay - t[0]["compute"])
        assert split[(0, step)].peer_wait_ms == pytest.approx(delay, abs=slack + 0.5), (step, t)
        assert split[(1, step)].peer_wait_ms == 0.0
        for r in (0, 1):
            assert split[(r, step)].link_wait_ms >= t[r]["link_exposed"] - 1e-6   # the wire beside no compute


def _before_collective(record, rank: int, step: int) -> dict[str, float]:
    """A rank's way to its step's one all-reduce (ms): when the step started, forward+backward,
    the link transfer (all of it, and its part beside no compute), and the rest (between the
    step's start and the all-reduce: loading the batch, hand-offs between threads)."""
    from dpviz.analysis.overlap import length, minus

    spans = record.spans_of(rank=rank, step=step)
    start = next(s.start_us for s in spans if s.kind == "step")
    compute = [(s.start_us, s.end_us) for s in spans if s.kind in ("forward", "backward")]
    link = next(s for s in spans if s.kind == "link")
    arrive = next(s.start_us for s in spans if s.kind == "allreduce")
    wire = [(link.start_us, link.end_us)]
    return {"start": start / 1e3, "compute": length(compute) / 1e3, "link": link.dur_us / 1e3,
            "link_exposed": length(minus(wire, compute)) / 1e3,
            "other": (arrive - start - length(compute) - link.dur_us) / 1e3}


def test_exposed_split_on_known_intervals():
    """Rank 0 computes 0-100 µs and enters the all-reduce at 100; rank 1 computes until 250 and
    enters then; both end at 300. Rank 0's exposed 200 µs: 150 waiting for rank 1 (100-250),
    50 after it joined; rank 1's 50 µs are all after the last arrival (its own)."""
    from dataclasses import replace

    from dpviz.analysis.stragglers import exposed_split
    from dpviz.core.record import Span

    record = _record({0: [(100, 300, "all_reduce", 1)], 1: [(250, 300, "all_reduce", 1)]})
    compute = tuple(Span(rank=r, tid="m", name="bwd", kind="backward", start_us=0, end_us=e, step=0)
                    for r, e in ((0, 100), (1, 250)))
    record = replace(record, spans=record.spans + compute)
    split = {s.rank: s for s in exposed_split(record)}
    assert (split[0].exposed_ms, split[0].peer_wait_ms, split[0].link_wait_ms) == pytest.approx((0.2, 0.15, 0.05))
    assert (split[1].exposed_ms, split[1].peer_wait_ms, split[1].link_wait_ms) == pytest.approx((0.05, 0.0, 0.05))

"""Cross-rank analysis: collectives matched across ranks, waits, and a live straggler."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpviz.cli import main as cli
from dpviz.config import RunConfig
from dpviz.traces.stragglers import collective_instances, straggler_ranking
from dpviz.traces.files import load_trace

GLOO2 = sorted((Path(__file__).parent / "data" / "dpviz-gloo-2rank").glob("rank-*.json.gz"))


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
    """Rank 1 sleeps 100 ms in every forward; rank 0 then waits in each step's all-reduce.
    Rank 0's wait is the delay give or take the two ranks' forward/backward difference and
    scheduling noise (a few ms idle; tens of ms seen with 16 processes on these 2 cores,
    where 40 ms once failed): half the delay is a safe floor."""
    delay = 100.0
    assert cli(["run", "--ranks", "2", "--steps", "3", "--slow-rank", "1", "--delay-ms", str(delay),
                "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "summary.json").read_text())
    assert [s["straggler"] for s in data["stragglers"]] == [1, 1, 1]
    for s in data["stragglers"]:
        assert s["waited_ms"]["0"] > delay / 2 > s["waited_ms"]["1"]
    from dpviz.record import load
    record = load(tmp_path / "record.json")
    for c in collective_instances(record):
        if c.op == "all_reduce":
            assert c.last_rank == 1 and c.wait_ms[0] > delay / 2


def test_collectives_are_matched_per_process_group():
    """Two groups' collectives interleave differently on two ranks (NCCL names the group):
    matched per group they line up; without the names they would pair the wrong ones."""
    from dpviz.record import RunRecord, Span

    def comm(rank, start, op, group):
        return Span(rank=rank, tid="s", name=op, kind="collective", start_us=start,
                    end_us=start + 10, step=0, op=op, group=group)

    spans = [Span(rank=r, tid="m", name="step", kind="step", start_us=0, end_us=100, step=0)
             for r in (0, 1)]
    spans += [comm(0, 10, "all_gather", "dp"), comm(0, 20, "all_to_all", "ep"),
              comm(1, 5, "all_to_all", "ep"), comm(1, 30, "all_gather", "dp")]
    record = RunRecord(config={}, world_size=2, spans=tuple(spans), buckets=(), micro_steps=(),
                       losses={}, checks=(), ddp_logging={})
    by_op = {c.op: c for c in collective_instances(record)}
    assert {c.group for c in by_op.values()} == {"dp", "ep"}
    # rank 0 arrived at 10 µs, rank 1 at 30 (µs → ms divisions: equal to ~1e-15)
    assert by_op["all_gather"].wait_ms == pytest.approx({0: 0.02, 1: 0.0}, abs=1e-12)
    assert by_op["all_to_all"].last_rank == 0
    (step,) = straggler_ranking(record)
    assert step.late_ms == pytest.approx({0: 0.015, 1: 0.02}, abs=1e-12) and step.straggler == 1

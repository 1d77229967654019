"""A rank's profile reduced in memory (`dpviz.engine.profile_events`) gives the record exactly the
spans its full chrome trace gives, for the runs the sliders re-run."""
from __future__ import annotations

import contextlib
import time

import pytest

from dpviz.analysis.scan import LINK_ALLREDUCE_PREFIX, LINK_PREFIX, read_trace, shift, spans_from_trace
from dpviz.engine.assemble import assemble_run, rank_spans
from dpviz.engine.ddp_run import train_rank
from dpviz.engine.profile_events import TIGHT_MARK_S, clock_mark, first_start, latest_mark, scan_events
from dpviz.lessons.accumulation.live import DEMO_CONFIG
from dpviz.lessons.buckets.live import sweep_config

# chrome JSON writes ts in µs with 3 decimals at ~4.6e12 µs, where a float64 step is
# ~0.001 µs: a span's start read from the file is within 0.002 µs of the exact ns value
TS_TOL_US = 0.002


def _fields(span, tids):
    return (span.rank, tids[span.rank, span.tid], span.name, span.kind, span.step, span.bucket,
            span.bytes, span.op, span.group)


def _sorted(spans):
    origin = min(s.start_us for s in spans if s.kind == "step")
    return sorted(shift(spans, origin), key=lambda s: (s.rank, s.start_us, s.name))


def _reduced(events_by_rank):
    """Each rank's spans from its reduced events, all from one origin (as `assemble_run`)."""
    origin = first_start(events_by_rank.values())
    return [s for r, evs in sorted(events_by_rank.items()) for s in scan_events(evs, origin)[0].spans(r)]


@pytest.mark.parametrize("cfg", [sweep_config(steps=2, bucket_cap_mb=1.0),
                                 DEMO_CONFIG.replace(steps=2, accum_steps=3)],
                         ids=["bucket cap", "accumulation"])
def test_reduced_events_give_the_spans_of_the_full_trace(cluster2, cfg):
    results = cluster2.run_task(train_rank, cfg, (), True)   # both: the file and the events
    files = {r: read_trace(res["trace_path"]) for r, res in enumerate(results)}
    assert all(len(res["events"]) < len(files[r]["traceEvents"]) / 4 for r, res in enumerate(results))
    a = _sorted([s for r, t in sorted(files.items()) for s in rank_spans(cfg, t, r)])
    b = _sorted(_reduced({r: res["events"] for r, res in enumerate(results)}))
    assert len(a) == len(b) and any(s.kind == "allreduce" and s.bytes for s in a)
    # thread ids differ (the file has the OS's, the events the profiler's): same threads
    tids_a = {t: i for i, t in enumerate(dict.fromkeys((s.rank, s.tid) for s in a))}
    tids_b = {t: i for i, t in enumerate(dict.fromkeys((s.rank, s.tid) for s in b))}
    for x, y in zip(a, b):
        assert _fields(x, tids_a) == _fields(y, tids_b)
        assert abs(x.start_us - y.start_us) <= TS_TOL_US and abs(x.end_us - y.end_us) <= TS_TOL_US
    record = assemble_run(cfg, results)
    assert len(record.spans) == len(b) and record.buckets


def test_ranks_share_one_origin_and_events_read_as_their_chrome_trace():
    """`scan_events` feeds TraceScan the fields the chrome trace of the same events would
    hold (µs from the earliest event of any rank), so both give exactly the same spans."""
    events = {0: [("dpviz:clock", "user_annotation", 4_000, 10, 1, [], []),
                  ("dpviz:step#0", "user_annotation", 5_000, 2_000, 1, [], []),
                  ("c10d::allreduce_", "cpu_op", 5_100, 300, 1, [[[4]]], ["TensorList"])],
              1: [("dpviz:step#0", "user_annotation", 5_500, 2_000, 2, [], []),
                  ("gloo:all_reduce", "user_annotation", 6_500, 100, 3, [[4]], ["float"])]}
    assert first_start(events.values()) == 4_000 and first_start([]) == 0
    as_chrome = {r: {"traceEvents": [
        {"ph": "X", "cat": cat, "name": name, "ts": (start - 4_000) / 1e3, "dur": dur / 1e3, "tid": tid,
         "args": {"Input Dims": shapes, "Input type": dtypes} if shapes else {}}
        for name, cat, start, dur, tid, shapes, dtypes in evs]} for r, evs in events.items()}
    spans = _reduced(events)
    assert spans == [s for r, t in sorted(as_chrome.items()) for s in spans_from_trace(t, r)]
    assert [(s.rank, s.kind, s.start_us, s.bytes) for s in spans if s.kind != "step"] == [
        (0, "allreduce_launch", 1.1, 16), (1, "allreduce", 2.5, 16)]
    assert scan_events(events[0], 4_000)[1] == 0.005 and scan_events(events[1], 4_000)[1] is None


def test_link_all_reduces_take_the_bucket_their_name_gives_not_their_start_order():
    """Two buckets' link all-reduces recorded in swapped start order (#1 before #0) keep
    their own numbers, beside a trace's hooks and transfers."""
    events = [("dpviz:clock", "user_annotation", 0, 2, 1, [], []),
              ("dpviz:step#0", "user_annotation", 1_000, 100_000, 1, [], []),
              ("dpviz:micro_step#0", "user_annotation", 2_000, 90_000, 1, [], []),
              ("dpviz:bucket#0", "user_annotation", 10_000, 100, 1, [], []),
              ("dpviz:bucket#1", "user_annotation", 20_000, 100, 1, [], [])]
    transfers = [{"ph": "X", "cat": "user_annotation", "name": f"{LINK_PREFIX}{index}",
                  "tid": "dpviz link", "ts": ts, "dur": 5.0} for index, ts in [(0, 11.0), (1, 21.0)]]
    reduces = [{"ph": "X", "cat": "user_annotation", "name": f"{LINK_ALLREDUCE_PREFIX}{index}",
                "tid": "dpviz link all-reduce", "ts": ts, "dur": 5.0,
                "args": {"Input Dims": [[numel]], "Input type": ["float"]}}
               for index, ts, numel in [(1, 30.0, 4), (0, 40.0, 8)]]
    scan, mark = scan_events(events, 0)
    for ev in transfers + reduces:   # as assemble_run puts them on the trace's clock
        scan.add({**ev, "ts": ev["ts"] + mark})
    got = sorted((s.kind, s.bucket, s.bytes) for s in scan.spans(0) if s.kind in ("allreduce", "link"))
    assert got == [("allreduce", 0, 32), ("allreduce", 1, 16), ("link", 0, None), ("link", 1, None)]


class _Annotation:
    """An annotation that, like a thread preempted inside it on a busy machine, takes
    `slow_s` on its first `slow` entries."""

    def __init__(self, slow: int, slow_s: float):
        self.slow, self.slow_s, self.windows = slow, slow_s, []

    @contextlib.contextmanager
    def __call__(self, name: str):
        entered = time.perf_counter()
        if len(self.windows) < self.slow:
            time.sleep(self.slow_s)
        yield
        self.windows.append((entered, time.perf_counter()))


def test_a_wide_clock_mark_is_taken_again_until_narrow_and_readers_take_the_latest():
    """A mark whose two reads lie 5 ms apart would tie the clocks only to 2.5 ms: it is
    retried, and the time returned is the middle of the last (narrow) mark."""
    annotate = _Annotation(slow=2, slow_s=5e-3)
    mid = clock_mark(annotate)
    assert len(annotate.windows) >= 3
    first, last = annotate.windows[0], annotate.windows[-1]
    assert first[1] - first[0] > TIGHT_MARK_S
    # the annotation lies between the two reads: their middle is within half their gap of its
    assert abs(mid - (last[0] + last[1]) / 2) <= TIGHT_MARK_S / 2
    assert latest_mark([(10.0, 4.0), (30.0, 2.0), (20.0, 8.0)]) == 31.0
    assert latest_mark([]) is None


@pytest.mark.parametrize("changes, shapes", [
    (dict(model="mlp", bucket_cap_mb=0.25), False),
    (dict(model="gpt", bucket_cap_mb=0.25), False),
    (dict(model="cnn", bucket_cap_mb=0.01), True),    # BatchNorm buffers broadcast every forward
    (dict(model="mlp", bucket_cap_mb=0.25, accum_steps=3, no_sync="off"), False),
    (dict(model="mlp", bucket_cap_mb=0.25, link="classroom"), False),
    (dict(model="cnn", bucket_cap_mb=0.01, link="classroom"), True)],
    ids=["mlp", "gpt", "cnn", "mlp-K3-every-micro-step-syncs", "mlp-link", "cnn-link"])
def test_a_slider_run_records_shapes_only_where_its_record_needs_them(cluster2, changes, shapes):
    """A slider's run (`for_slider`: buckets rebuilt before the drawn step) profiles without
    shapes where the drawn step's only collectives are the buckets' all-reduces, whose bytes
    then come from the hook's notes: its record has the same spans (kinds, names, buckets,
    ops, bytes) and buckets as the same run recorded with shapes."""
    from rank_tasks import shapes_recorded, train_rank_with_shapes

    from dpviz.core.config import RunConfig, for_slider

    cfg = for_slider(RunConfig(steps=2, **changes))
    assert cluster2.run_task(shapes_recorded, cfg) == [shapes, shapes]
    mine = assemble_run(cfg, cluster2.run_task(train_rank, cfg))
    with_shapes = assemble_run(cfg, cluster2.run_task(train_rank_with_shapes, cfg))
    content = lambda r: sorted((s.rank, s.kind, s.name, s.step, s.bucket, s.op, s.bytes) for s in r.spans)
    assert content(mine) == content(with_shapes)
    assert [s for s in content(mine) if s[1] == "allreduce" and s[6]]   # bytes were read
    strip = lambda r: [(b.rank, b.step, b.micro_step, b.index, b.bytes, b.params) for b in r.buckets]
    assert strip(mine) == strip(with_shapes)


@pytest.mark.parametrize("cfg", [sweep_config(steps=2, bucket_cap_mb=1.0),
                                 DEMO_CONFIG.replace(steps=2, accum_steps=3)],
                         ids=["bucket cap", "accumulation"])
def test_a_run_read_from_its_reduced_events_records_what_its_trace_file_holds(cluster2, cfg):
    """A slider's run reads its profile's events on the rank (`reduce_profile`) instead of a
    chrome trace: the same ranks' results read both ways give the same spans (kinds, names,
    steps, buckets, ops, bytes) and buckets."""
    from dpviz.core.config import for_slider

    cfg = for_slider(cfg)
    results = cluster2.run_task(train_rank, cfg, (), True)   # reduced events, and the trace file
    assert all(r["events"] and r["trace_path"] for r in results)
    mine = assemble_run(cfg, [{**r, "trace_path": None} for r in results])
    full = assemble_run(cfg, [{**r, "events": None} for r in results])
    content = lambda r: sorted((s.rank, s.kind, s.name, s.step, s.bucket, s.op, s.bytes) for s in r.spans)
    assert content(mine) == content(full) and [s for s in content(mine) if s[1] == "allreduce" and s[6]]
    strip = lambda r: [(b.rank, b.step, b.micro_step, b.index, b.bytes, b.params) for b in r.buckets]
    assert strip(mine) == strip(full)

"""A rank's profile reduced in memory (`dpviz.engine.profile_events`) gives the record exactly the
spans its full chrome trace gives, for the runs the sliders re-run."""
from __future__ import annotations

import pytest

from dpviz.analysis.scan import read_trace, shift, spans_from_trace
from dpviz.engine.assemble import assemble_run, rank_spans
from dpviz.engine.ddp_run import train_rank
from dpviz.engine.profile_events import first_start, scan_events
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

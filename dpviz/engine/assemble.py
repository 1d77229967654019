"""A live run's per-rank results turned into one `RunRecord` (parent side, no torch).

Each rank sends what it saw (`ddp_run.train_rank`): its profile reduced to the events the
record reads, or a chrome trace file; the hook's notes of every bucket; the link thread's
transfers. Here they are put on one clock and read into spans, buckets and micro-steps.
"""
from __future__ import annotations

from pathlib import Path

from dpviz.analysis.recompute import recompute_spans
from dpviz.analysis.scan import (
    CLOCK_MARK, MICRO_PREFIX, merge_traces, read_trace, shift, spans_from_trace, write_json,
)
from dpviz.core.config import RunConfig
from dpviz.core.record import Bucket, MicroStep, RunRecord, Span, StepCheck, save
from dpviz.engine.profile_events import first_start, latest_mark, scan_events


def assemble_run(cfg: RunConfig, results: list[dict], out_dir: Path | None = None) -> RunRecord:
    """Turn per-rank results and their profiles into one record (and files, with `out_dir`).

    Spans come from a rank's reduced events when it sent them, else from its trace file."""
    files = {r: _with_link(read_trace(res["trace_path"]), res.get("link_events", []))
             for r, res in enumerate(results) if res["trace_path"]}
    reduced = {r: res["events"] for r, res in enumerate(results) if res.get("events") is not None}
    origin = first_start(reduced.values())
    spans = [s for r in sorted({*files, *reduced})
             for s in (_reduced_spans(reduced[r], origin, results[r].get("link_events", []), r)
                       if r in reduced else rank_spans(cfg, files[r], r))]
    steps = [s.start_us for s in spans if s.kind == "step"]
    spans = shift(spans, min(steps)) if steps else spans
    record = RunRecord(
        config=cfg.to_dict(), world_size=cfg.world_size,
        spans=tuple(sorted(spans, key=lambda s: (s.rank, s.start_us))),
        buckets=tuple(_buckets(results, spans, cfg.profile_from)),
        micro_steps=tuple(_micro_steps(spans)),
        losses={r: tuple(res["losses"]) for r, res in enumerate(results)},
        checks=tuple(StepCheck(**c) for c in results[0]["checks"]),
        ddp_logging={r: res["ddp_logging"] for r, res in enumerate(results)},
        step_wall_ms={r: tuple(res["step_wall_ms"]) for r, res in enumerate(results)},
        param_names=results[0]["workload"].param_names(),
        param_bytes=tuple(p.bytes for p in results[0]["workload"].params),
        workload=results[0]["workload"])
    if out_dir is not None:
        for rank, trace in files.items():
            write_json(trace, out_dir / f"trace-rank{rank}.json")
        write_json(merge_traces(files), out_dir / "trace-merged.json")
        save(record, out_dir / "record.json")
    for res in results:
        if res["trace_path"]:
            Path(res["trace_path"]).unlink(missing_ok=True)
    return record


def _with_link(trace: dict, link_events: list[dict]) -> dict:
    """Add the link thread's transfers to a rank's trace (`_on_trace_clock`)."""
    if link_events:
        marks = [ev for ev in trace["traceEvents"] if isinstance(ev, dict) and ev.get("name") == CLOCK_MARK]
        pid = marks[0].get("pid", 0)
        trace["traceEvents"] += [{**ev, "pid": pid} for ev in _on_trace_clock(
            link_events, latest_mark((ev["ts"], ev.get("dur", 0)) for ev in marks))]
    return trace


def _reduced_spans(events: list, origin_ns: int, link_events: list[dict], rank: int) -> list[Span]:
    """One rank's spans from its reduced events (`dpviz.engine.profile_events`) and the link
    thread's transfers (`_on_trace_clock`): a profile is reduced only where no recomputed
    forward is to be found (`_profile_output`)."""
    scan, mark = scan_events(events, origin_ns)
    for ev in _on_trace_clock(link_events, mark):
        scan.add(ev)
    return scan.spans(rank)


def _on_trace_clock(link_events: list[dict], mark_us: float) -> list[dict]:
    """The link thread's transfers moved onto a trace's clock by the middle of its clock
    mark (`mark_us`: the same instant on both clocks, to within the annotation's few µs)."""
    return [{**ev, "ts": ev["ts"] + mark_us} for ev in link_events]


def rank_spans(cfg: RunConfig, trace: dict, rank: int) -> list[Span]:
    """One rank's spans from its trace, with recomputed forwards when checkpointing."""
    spans = spans_from_trace(trace, rank)
    return spans + _recompute(trace, rank, spans) if cfg.checkpoint_every else spans


def _recompute(trace: dict, rank: int, spans: list[Span]) -> list[Span]:
    """Recomputed forwards inside backward: found by nesting, which no event name tells."""
    main = next(s.tid for s in spans if s.rank == rank and s.kind == "forward")
    windows = [s for s in spans if s.rank == rank and s.kind == "step"]
    return [Span(rank=rank, tid=main, name="recompute", kind="recompute", start_us=a, end_us=b,
                 step=next((w.step for w in windows if w.start_us <= a < w.end_us), None))
            for a, b in recompute_spans(trace, forward_mark="DistributedDataParallel.forward")]


def _buckets(results: list[dict], spans: list[Span], profile_from: int = 0) -> list[Bucket]:
    """The hook's notes of the profiled steps, timed by their trace spans (the k-th call is
    the k-th span)."""
    out = []
    for rank, res in enumerate(results):
        hooks = sorted((s for s in spans if s.rank == rank and s.kind == "bucket_hook"),
                       key=lambda s: s.start_us)
        for seen, span in zip((n for n in res["buckets"] if n["step"] >= profile_from), hooks):
            out.append(Bucket(rank=rank, step=seen["step"], micro_step=seen["micro_step"],
                              index=seen["index"], numel=seen["numel"], bytes=seen["bytes"],
                              params=tuple(seen["params"]), hook_us=span.start_us))
    return out


def _micro_steps(spans: list[Span], rank: int = 0) -> list[MicroStep]:
    """Each micro-step of one rank with the all-reduces launched inside it (from its trace).
    With an emulated link the link thread launches them, unseen by the profiler: there each
    bucket's transfer, which starts inside the micro-step that handed it over, counts."""
    launches = [s for s in spans if s.rank == rank and s.kind in ("allreduce_launch", "link")]
    out = []
    for m in sorted((s for s in spans if s.rank == rank and s.kind == "micro_step"),
                    key=lambda s: s.start_us):
        count = sum(m.start_us <= s.start_us < m.end_us for s in launches)
        out.append(MicroStep(step=m.step, micro_step=int(m.name[len(MICRO_PREFIX):]),
                             all_reduces=count, start_us=m.start_us, end_us=m.end_us))
    return out

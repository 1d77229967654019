"""summary.json: a run's or a trace's per-step numbers as data, for scripts and CI.

`rows`: one per (rank, step) — step, compute, communication and idle time (ms), dpviz's
per-step overlap fraction beside the overlap with backward, and communication by op.
`breakdown`: the temporal breakdown per rank, HTA's where HTA reads the trace, with its
`definition` (see overlap.temporal_breakdown).
`overlap`: the comm/comp overlap per rank over a whole window, HTA's where HTA reads the
trace, with its `definition`: the figure the CLI prints as "comm/comp overlap".
`definitions`: each definition named above, in words.
`stragglers`: per step, ranks latest first (see stragglers.straggler_ranking); several ranks only.
`unmatched_collectives`: per rank, step and op, collectives no loaded peer ran at the same time.
`hta_differences`: the record's notes on where HTA computes a figure differently here, and why.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from dpviz.analysis.hta import HTA_DIFFERS
from dpviz.analysis.overlap import (
    DEFINITIONS, analysed_steps, comm_compute_overlap, overlap_definition, record_ranks, summarize,
    temporal_breakdown,
)
from dpviz.analysis.stragglers import match_collectives, straggler_ranking
from dpviz.core.record import RunRecord


def summary(record: RunRecord) -> dict:
    """The record's numbers as plain JSON-ready data (ms, fractions in 0..1, percents)."""
    chosen = analysed_steps(record)
    rows = [{"rank": r.rank, "step": r.step, "step_ms": r.step_ms, "compute_ms": r.compute_ms,
             "comm_ms": r.comm_ms,   # overlaps: None (n/a) in a step without communication
             "overlap_fraction": r.overlap_fraction if r.comm_ms else None,
             "backward_overlap_fraction": r.backward_overlap_fraction if r.comm_ms else None,
             "exposed_comm_ms": r.exposed_comm_ms, "idle_ms": r.idle_ms,
             "n_collectives": r.n_collectives, "comm_ms_by_op": r.comm_ms_by_op,
             "n_by_op": r.n_by_op}
            for r in summarize(record)]
    return {"source": record.config.get("source", "live run"), "world_size": record.world_size,
            "ranks": record_ranks(record), "steps": record.steps,
            "analysed_steps": list(chosen.steps), "analysed_steps_rule": str(chosen),
            "dropped_steps": [{"step": s, "why": why} for s, why in chosen.dropped],
            "overlap": [{"rank": rank, "overlap_fraction": comm_compute_overlap(record, rank),
                         "definition": overlap_definition(record, rank)}
                        for rank in record_ranks(record)],
            "breakdown": [asdict(b) for b in temporal_breakdown(record)],
            "stragglers": _stragglers(record), "unmatched_collectives": _unmatched(record),
            "hta_differences": [n for n in record.notes if HTA_DIFFERS in n],
            "definitions": DEFINITIONS, "rows": rows}


def _stragglers(record: RunRecord) -> list[dict]:
    if len(record_ranks(record)) < 2:
        return []
    return [asdict(s) | {"straggler": s.straggler} for s in straggler_ranking(record)]


def _unmatched(record: RunRecord) -> list[dict]:
    """Collectives no loaded peer ran at the same time (sampled ranks, cut-off instances)."""
    if len(record_ranks(record)) < 2:
        return []
    return [asdict(u) for u in match_collectives(record)[1]]


def write_summary(record: RunRecord, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.write_text(json.dumps(summary(record), indent=1))
    return path

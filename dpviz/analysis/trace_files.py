# Over 300 lines: one pipeline (files → per-rank spans → one clock → a RunRecord) in short steps.
"""Bring your own trace: per-rank PyTorch profiler traces → the RunRecord a live run makes.

`load_trace(paths)` streams each `.json`/`.json.gz` file a chunk at a time (a trace of a
real job can be gigabytes: its events never sit in memory together), types the events
with `dpviz.analysis.scan.TraceScan`, and puts every rank on one clock, so the timeline, bucket
and overlap figures of live runs draw it unchanged. What only a live run measures (the
comm hook's buckets, the equality checks, DDP's logging data) stays empty; what was
inferred instead is written in the record's `notes`.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import time
import zlib
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import msgspec

from dpviz.analysis.hta import HTA_DIFFERS, HtaReading, HtaResult, job_results, result_notes
from dpviz.analysis.scan import (
    COMM_KINDS, TraceError, TraceScan, collector_paused, rank_from_name, shift,
)
from dpviz.core.record import RunRecord, Span

FACADE = ("load_trace",)  # what `dpviz.<name>` offers from here

ISAL_FROM_BYTES = 512 << 10   # gzipped traces this big are inflated by ISA-L (benchmarks/README.md)
CHUNK_CHARS = 1 << 20          # characters read at a time; doubled while one value spans more
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
NODE_FIELD = "dpvizNode"   # top-level field dpviz.engine.torchrun_entry adds: {"node": N, "local_rank": L}


class _Args(msgspec.Struct):
    """The args of an event that dpviz reads; the fast reader skips every other one."""

    stream: Any = None
    correlation: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    dtype: Any = None
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_dims_1_8: Any = msgspec.field(default=None, name="Input dims")   # PyTorch 1.8's spelling
    input_type: Any = msgspec.field(default=None, name="Input type")
    group: Any = msgspec.field(default=None, name="Process Group Name")
    group_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    seq: Any = msgspec.field(default=None, name="Seq")

    def get(self, name: str, default: Any = None) -> Any:
        """An arg by the name the trace gives it, as a dict of the args written would."""
        value = getattr(self, _ATTRS.get(name, "_"), None)
        return default if value is None else value

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None


# The trace's arg names → _Args' fields (args it did not write, or wrote as null, read as absent).
_ATTRS = {f.encode_name: f.name for f in msgspec.structs.fields(_Args)}


class _Event(msgspec.Struct):
    """The fields of a trace event that TraceScan reads (as `dpviz.analysis.scan.EventFields`),
    with `dict.get`'s defaults."""

    ph: Any = None
    cat: Any = ""
    name: Any = None
    ts: Any = None
    dur: Any = 0
    tid: Any = ""
    id: Any = None
    args: _Args | None = None


_BATCH = msgspec.json.Decoder(list[_Event])


# --- one file, streamed -------------------------------------------------------------------

class _Stream:
    """The characters of a JSON file, pulled in chunks, decoded one value at a time."""

    def __init__(self, text: io.TextIOBase, path: Path):
        self.text, self.path = text, path
        self.buf, self.pos, self.done, self.eof = "", 0, 0, False   # done: chars dropped before buf
        self.slow_until = 0     # a batch failed before this character: read one at a time

    def _more(self) -> bool:
        """Append a chunk (at least as long as what is buffered, so re-decoding stays linear)."""
        if self.eof:
            return False
        chunk = self.text.read(max(CHUNK_CHARS, len(self.buf) - self.pos))
        if not chunk:
            self.eof = True
            return False
        self.done += self.pos
        self.buf, self.pos = self.buf[self.pos:] + chunk, 0
        return True

    def peek(self) -> str:
        """The next non-blank character, not consumed ('' at the end of the file)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        char = self.peek()
        if not char or char not in chars:
            found = repr(char) if char else "the end of the file"
            raise self.error(f"expected {what}, found {found}")
        self.pos += 1
        return char

    def value(self) -> Any:
        """Decode the next JSON value; a value cut by the chunk boundary reads more first."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.eof:   # a number at the very end may go on
                    self.pos = end
                    return value
            except json.JSONDecodeError as err:
                if self.eof:
                    self.pos = err.pos
                    raise self.error(err.msg) from None
            self._more()

    def batch(self) -> list[_Event] | None:
        """Decode every whole event already buffered in one call, with the typed decoder.

        The batch is cut after the last '}' followed by ',' and the next event's '{' (inside
        an event, '},' is followed by a key, so such a cut is rarely inside one). If the cut
        is inside a string or a nested value all the same, '[' + batch + ']' is not valid
        JSON (a string or the event's own '{' stays open), so a batch that decodes is exactly
        a run of whole events. None when no cut is buffered yet or the batch does not decode
        (an odd event: the caller reads it one value at a time, which counts what is
        malformed and names what is corrupt).

        Less than a chunk left buffered is topped up first: what is left after a batch is
        the event the chunk cut, and reading it value by value would fail once per chunk.
        """
        if self.done + self.pos < self.slow_until:
            return None
        if len(self.buf) - self.pos < CHUNK_CHARS:
            self._more()
        cut = self.buf.rfind("}", self.pos)
        while cut >= 0:
            after = _WS.match(self.buf, cut + 1).end()
            if after < len(self.buf) and self.buf[after] == ",":
                after = _WS.match(self.buf, after + 1).end()
                if after < len(self.buf) and self.buf[after] == "{":
                    break
            cut = self.buf.rfind("}", self.pos, cut)
        if cut < 0:
            return None
        try:
            events = _BATCH.decode("[" + self.buf[self.pos:cut + 1] + "]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.slow_until = cut + 1 + self.done     # that stretch goes value by value
            return None
        self.pos = cut + 1
        return events

    def error(self, message: str) -> TraceError:
        return TraceError(f"{self.path} is not a valid trace file: {message} at character "
                          f"{self.done + self.pos:,} (truncated or corrupt?)")


Batch = Callable[[list[_Event]], None]


def stream_events(path: str | os.PathLike, sink: Callable[[Any], None],
                  batch: Batch | None = None) -> dict | None:
    """Feed every entry of the trace's `traceEvents` to `sink`; return the other top-level
    fields (`distributedInfo`, `baseTimeNanoseconds`, ...), wherever they sit in the file, or
    None for a bare array of events (PyTorch 1.8's first form: no top-level fields).

    With `batch`, runs of whole events are decoded a buffer at a time by a typed decoder
    (only the fields dpviz reads, ~4x faster than json) and handed to `batch`; events that
    do not fit its types still go one by one to `sink`. Memory stays a chunk's worth.

    Gzip is recognised by its magic bytes, not the name. Every way the file can be broken
    (missing, truncated, not JSON, not a trace) is a TraceError naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"no such trace file: {path}")
    inflater, inflate_error = _inflater(path.stat().st_size)
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            binary = inflater(fileobj=raw) if gzipped else raw
            with io.TextIOWrapper(binary, encoding="utf-8") as text:
                return _read_top_level(_Stream(text, path), sink, batch)
    except (OSError, EOFError, zlib.error, inflate_error, UnicodeDecodeError) as err:
        raise TraceError(f"{path} cannot be read ({type(err).__name__}: {err})") from None


def _inflater(nbytes: int) -> tuple[type, type[Exception]]:
    """The gzip reader for a file of `nbytes` and the error its inflate raises: ISA-L's
    (optional, `pip install dpviz[fast]`: the same bytes, faster) from ISAL_FROM_BYTES on,
    where it saves more than its import costs; the stdlib's otherwise."""
    if nbytes >= ISAL_FROM_BYTES:
        try:
            from isal.igzip import IGzipFile
            from isal.isal_zlib import error
            return IGzipFile, error
        except ImportError:
            pass
    return gzip.GzipFile, zlib.error


def _read_top_level(stream: _Stream, sink: Callable[[Any], None], batch: Batch | None
                    ) -> dict | None:
    first = stream.expect("{[", "a trace object '{' (or an event array '[')")
    header: dict | None = {}
    if first == "[":          # the bare "JSON array" form of a chrome trace
        _read_array(stream, sink, batch)
        header = None
    else:
        seen_events = False
        if stream.peek() == "}":
            stream.pos += 1
        else:
            while True:
                key = stream.value()
                if not isinstance(key, str):
                    raise stream.error("expected a field name")
                stream.expect(":", "':'")
                if key == "traceEvents":
                    stream.expect("[", "the traceEvents list '['")
                    _read_array(stream, sink, batch)
                    seen_events = True
                else:
                    header[key] = stream.value()
                if stream.expect(",}", "',' or '}'") == "}":
                    break
        if not seen_events:
            raise TraceError(f"{stream.path} is not a profiler trace: no 'traceEvents' list")
    if stream.peek():
        raise stream.error("unexpected data after the trace")
    return header


def _read_array(stream: _Stream, sink: Callable[[Any], None], batch: Batch | None) -> None:
    if stream.peek() == "]":
        stream.pos += 1
        return
    while True:
        events = stream.batch() if batch is not None else None
        if events is not None:
            batch(events)
        else:
            sink(stream.value())
        if stream.expect(",]", "',' or ']' between events") == "]":
            return


# --- files → one record -------------------------------------------------------------------

@dataclass(frozen=True)
class LoadedRank:
    """One trace file, scanned: its rank, how that was found, and its header facts."""

    path: Path
    rank: int
    rank_source: str          # "distributedInfo", "argument", "file name" or DEFAULT_RANK
    world_size: int | None
    backend: str | None
    base_ns: int | None       # baseTimeNanoseconds: the file's clock origin, if written
    node: dict | None         # dpvizNode: {"node", "local_rank"}, in traces dpviz.engine.torchrun_entry wrote
    spans: list[Span]         # on the trace's own clock
    notes: list[str]          # what the scan inferred or skipped
    hta: HtaReading           # what HTA's breakdown and overlap read of it
    bare_array: bool          # a bare array of events (PyTorch 1.8's first form), no trace object
    events: int
    megabytes: float
    seconds: float


# How a lone file that names no rank is read: as rank 0, as HTA reads it (with a warning).
DEFAULT_RANK = "default: no distributedInfo, none given, none in its name; HTA defaults to rank 0 too"


@collector_paused()
def scan_file(path: str | os.PathLike, rank: int | None = None,
              default_rank: int | None = None) -> LoadedRank:
    """Stream one trace file through a TraceScan, find its rank, and resolve its spans.

    Rank: the trace's `distributedInfo`, else `rank`, else a `rank<N>` in the file name,
    else `default_rank` (a job of one file); none of them is an error that says how to give one.
    """
    path = Path(path)
    scan, t0 = TraceScan(), time.perf_counter()
    header = stream_events(path, scan.add, batch=scan.add_batch)
    seconds = time.perf_counter() - t0
    bare_array, header = header is None, header or {}
    if scan.events and not scan.phased:
        raise TraceError(f"{path} is not a chrome trace: none of its {scan.events:,} events has "
                         "a 'ph' (phase) field, as profiler trace events do")
    info = header.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    found, source = _int(info.get("rank")), "distributedInfo"
    if found is not None and rank is not None and rank != found:
        raise TraceError(f"{path}: its distributedInfo says rank {found} but rank {rank} was "
                         "given: drop the rank argument for this file")
    if found is None:
        found, source = (rank, "argument") if rank is not None else (rank_from_name(path), "file name")
    if found is None:
        found, source = default_rank, DEFAULT_RANK
    if found is None:
        raise TraceError(f"{path} has no distributedInfo and no 'rank<N>' in its name: pass its "
                         "rank (load_trace(paths, ranks=[...]) or --ranks N,...)")
    backend = info.get("backend")
    return LoadedRank(path=path, rank=found, rank_source=source,
                      world_size=_int(info.get("world_size")),
                      backend=backend if isinstance(backend, str) else None,
                      base_ns=_int(header.get("baseTimeNanoseconds")),
                      node=_node(header.get(NODE_FIELD)), spans=scan.spans(found),
                      notes=scan.notes(found), hta=scan.hta.reading(), bare_array=bare_array,
                      events=scan.events, megabytes=path.stat().st_size / 1e6, seconds=seconds)


def node_label(rank: int, node: dict) -> str:
    """'node:local (rank R)', e.g. '1:0 (rank 2)': where a rank ran in a multi-node job."""
    return f"{node['node']}:{node['local_rank']} (rank {rank})"


def _node(value) -> dict | None:
    ok = isinstance(value, dict) and all(_int(value.get(k)) is not None for k in ("node", "local_rank"))
    return value if ok else None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# Files dpviz writes beside traces (a run's or load-trace's folder, reference figures): not traces.
NOT_TRACES = ("record.json", "summary.json", "trace-merged.json")


def trace_paths(inputs: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """The trace files named: files as given, a folder as the `.json`/`.json.gz` files in it
    (sorted; dpviz's own outputs left out)."""
    inputs = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    out: list[Path] = []
    for given in map(Path, inputs):
        if given.is_dir():
            found = sorted(p for p in given.iterdir() if p.is_file()
                           and p.name.endswith((".json", ".json.gz"))
                           and p.name not in NOT_TRACES and not p.name.startswith("hta-"))
            if not found:
                raise TraceError(f"folder {given} holds no trace files (.json or .json.gz)")
            out += found
        else:
            out.append(given)
    return out


@collector_paused()
def load_trace(paths: str | os.PathLike | Iterable[str | os.PathLike],
               ranks: Iterable[int | None] | None = None) -> RunRecord:
    """Per-rank profiler traces (`.json` or `.json.gz`, or folders of them) → one RunRecord
    on a common clock.

    `ranks` (one per file, None for "from the file") names the rank of files without
    `distributedInfo`; one file that names no rank is rank 0, as HTA reads it. Steps come
    from `ProfilerStep#N` (or dpviz's own step annotations), numbered as in the trace; a
    trace with none becomes one step, and the notes say so. `config["hta"]` holds each
    rank's temporal breakdown and comm/comp overlap as HTA 0.5.0 computes them
    (`dpviz.analysis.hta`).
    """
    paths = trace_paths(paths)
    if not paths:
        raise ValueError("no trace files given: pass one path per rank")
    given = [None] * len(paths) if ranks is None else list(ranks)
    if len(given) != len(paths):
        raise ValueError(f"{len(given)} ranks given for {len(paths)} files: give one per file "
                         "(None where the file knows its rank)")
    loaded = _scan_files(paths, given, default_rank=0 if len(paths) == 1 else None)
    _check_distinct(loaded)
    spans, aligned = _align_steps(_common_clock(loaded))
    filtered, hta = job_results({f.rank: f.hta for f in loaded})
    notes = [_file_note(f) for f in loaded] + [n for f in loaded for n in f.notes]
    notes += [n for f in loaded for n in _hta_notes(f, hta[f.rank], filtered)]
    notes += aligned
    notes += _step_notes(spans, loaded)
    world_size, backend, inferred = _job_facts(loaded, spans)
    notes += inferred
    origin = min(s.start_us for s in spans if s.kind == "step")
    return RunRecord(
        config={"source": "trace", "paths": [str(f.path) for f in loaded], "backend": backend,
                "world_size": world_size, "ranks": [f.rank for f in loaded],
                "clock_origin_us": origin,
                "hta": {str(rank): asdict(result.figures) for rank, result in hta.items()}},
        world_size=world_size,
        spans=tuple(sorted(_moved(spans, origin), key=lambda s: (s.rank, s.start_us))),
        buckets=(), micro_steps=(), losses={}, checks=(), ddp_logging={},
        notes=tuple(notes),
        rank_labels=({f.rank: node_label(f.rank, f.node) for f in loaded}
                     if all(f.node for f in loaded) else {}))


PARALLEL_MB = 4.0   # files this large in all (compressed) are read in parallel processes


def _scan_files(paths: list[Path], ranks: list[int | None],
                default_rank: int | None = None) -> list[LoadedRank]:
    """Every file scanned, in parallel processes (one per core, at most one per file) when
    there are several and enough bytes to repay starting them; in order otherwise."""
    workers = min(len(paths), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else os.cpu_count() or 1)
    size = sum(p.stat().st_size for p in paths if p.is_file()) / 1e6
    if workers < 2 or size < PARALLEL_MB:
        return [scan_file(p, r, default_rank) for p, r in zip(paths, ranks)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("forkserver")   # no fork of a threaded parent
    context.set_forkserver_preload([__name__])
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        return list(pool.map(scan_file, paths, ranks, [default_rank] * len(paths)))


def _moved(spans: list[Span], origin_us: float) -> list[Span]:
    """`shift(spans, origin_us)` in place: these spans were made by this load and nothing
    else holds them, so a GPU trace's tens of thousands need no third copy."""
    for s in spans:
        s.__dict__["start_us"] -= origin_us
        s.__dict__["end_us"] -= origin_us
    return spans


def _check_distinct(loaded: list[LoadedRank]) -> None:
    seen: dict[int, Path] = {}
    for f in loaded:
        if f.rank in seen:
            raise TraceError(f"{seen[f.rank]} and {f.path} are both rank {f.rank}: "
                             "load one file per rank")
        seen[f.rank] = f.path


def _common_clock(loaded: list[LoadedRank]) -> list[Span]:
    """Every rank's spans on one clock. Traces that say where their clock starts
    (`baseTimeNanoseconds`) are aligned by it; otherwise ranks are taken to share a clock,
    as they do on one machine."""
    bases = [f.base_ns for f in loaded if f.base_ns is not None]
    out = []
    for f in loaded:
        spans = f.spans
        offset_us = (f.base_ns - min(bases)) / 1e3 if f.base_ns is not None else 0.0
        out += shift(spans, -offset_us) if offset_us else spans
    return out


def _align_steps(spans: list[Span]) -> tuple[list[Span], list[str]]:
    """Every rank's steps numbered as the lowest rank's, matched by time, not by number.

    Ranks of one job can number their ProfilerSteps differently (one rank's profiler was
    created an iteration later). A rank's step takes the number of the lowest rank's step
    its window overlaps most; a step overlapping none keeps the median shift of the others
    (or, when none overlaps at all, the shift that pairs the first steps). A note says so.
    """
    windows: dict[int, dict[int, tuple[float, float]]] = defaultdict(dict)
    for s in spans:
        if s.kind == "step" and s.step is not None:
            windows[s.rank][s.step] = (s.start_us, s.end_us)
    if len({tuple(sorted(w)) for w in windows.values()}) <= 1:
        return spans, []
    ref_rank = min(windows)
    ref = windows[ref_rank]
    renumber: dict[int, dict[int, int]] = {}
    notes = []
    for rank, mine in sorted(windows.items()):
        if rank == ref_rank or sorted(mine) == sorted(ref):
            continue
        best = {k: max(ref, key=lambda j: _overlap(w, ref[j])) for k, w in mine.items()}
        best = {k: j for k, j in best.items() if _overlap(mine[k], ref[j]) > 0}
        shifts = sorted(j - k for k, j in best.items())
        shift_by = shifts[len(shifts) // 2] if shifts else min(ref) - min(mine)
        renumber[rank] = {k: best.get(k, k + shift_by) for k in mine}
        if len(set(renumber[rank].values())) < len(mine):     # two steps on one: by order
            renumber[rank] = {k: k + shift_by for k in mine}
        notes.append(f"rank {rank}: its ProfilerStep numbers {_span_of(sorted(mine))} differ from "
                     f"rank {ref_rank}'s {_span_of(sorted(ref))}: steps aligned by time and "
                     f"numbered as rank {ref_rank}'s (shift {shift_by:+d})")
    out = [replace(s, step=renumber[s.rank].get(s.step, s.step))
           if s.rank in renumber and s.step is not None else s for s in spans]
    return out, notes


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def _span_of(steps: list[int]) -> str:
    return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])


def _step_notes(spans: list[Span], loaded: list[LoadedRank]) -> list[str]:
    """Which steps each rank has, and how many spans fell outside all of them."""
    notes = []
    for f in loaded:
        mine = [s for s in spans if s.rank == f.rank]
        if not any(s.kind != "step" for s in mine):
            raise TraceError(f"{f.path} holds no event dpviz can draw (no kernels, collectives, "
                             "forward/backward/optimizer ops): is it a training trace?")
        steps = sorted({s.step for s in mine if s.kind == "step"})
        outside = sum(s.step is None for s in mine)
        notes.append(f"rank {f.rank}: steps {steps}"
                     + (f"; {outside} spans lie outside every step (before the first ProfilerStep, "
                        "after the last, or GPU events with no launch in the trace): no step "
                        "figure counts them" if outside else ""))
    return notes


def _job_facts(loaded: list[LoadedRank], spans: list[Span]) -> tuple[int, str, list[str]]:
    """World size and backend: from distributedInfo when files say it, inferred otherwise."""
    notes = []
    sizes = {f.world_size for f in loaded if f.world_size is not None}
    if len(sizes) > 1:
        raise TraceError(f"these traces come from different jobs: world sizes {sorted(sizes)}")
    world_size = sizes.pop() if sizes else max(f.rank for f in loaded) + 1
    if not any(f.world_size for f in loaded):
        notes.append(f"world size {world_size} inferred from the highest rank (no distributedInfo)")
    if world_size <= max(f.rank for f in loaded):
        raise TraceError(f"rank {max(f.rank for f in loaded)} does not fit world size {world_size}")
    backends = {f.backend for f in loaded if f.backend}
    if backends:
        backend = "/".join(sorted(backends))
    else:
        backend = _backend_from_events(spans)
        notes.append(f"backend {backend} inferred from the events (no distributedInfo)")
    if not any(s.kind in COMM_KINDS for s in spans):
        notes.append("no communication found: a single process, or a GPU job profiled without "
                     "ProfilerActivity.CUDA (NCCL's kernels are then missing)")
    missing = sorted(set(range(world_size)) - {f.rank for f in loaded})
    if missing:
        notes.append(f"loaded {len(loaded)} of {world_size} ranks; no trace for the others")
    return world_size, backend, notes


def _backend_from_events(spans: list[Span]) -> str:
    names = {s.name for s in spans if s.kind in (*COMM_KINDS, "allreduce_launch")}
    if any(n.startswith(("nccl", "ncclKernel", "ncclDevKernel")) for n in names):
        return "nccl"
    return "gloo" if any(n.startswith("gloo:") for n in names) else "unknown"


def _hta_notes(f: LoadedRank, result: HtaResult, filtered: bool) -> list[str]:
    """What HTA's figures of this file count or miss, and whether HTA reads the file at all."""
    out = result_notes(f.rank, result, filtered)
    if f.bare_array:
        out.append(f"rank {f.rank}: {HTA_DIFFERS}HTA 0.5.0 cannot read this file (a bare array of "
                   "events, PyTorch 1.8's first form; HTA reads a trace object only): the HTA "
                   "figures shown are what HTA's definitions give")
    return out


def _file_note(f: LoadedRank) -> str:
    rate = f.events / f.seconds if f.seconds else float("inf")
    return (f"rank {f.rank} (from {f.rank_source}): {f.path.name}, {f.megabytes:.1f} MB, "
            f"{f.events:,} events read in {f.seconds:.2f} s ({rate:,.0f} events/s)")

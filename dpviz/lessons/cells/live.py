"""Notebook cells run on warm ranks: the rank side of `%%ranks`, and the kernel's driver.

A cell's source is sent to every rank (functions in a notebook cannot be pickled; text can)
and run there in a namespace that lives as long as the rank: `rank`, `world_size`, `torch`
and `dist` are predefined, the process group is up. The last expression's value comes back
as its repr, as IPython shows it.

Each rank notes, in a file of its own, the collective it is in (`NotedDist` wraps the `dist`
the cell sees): when a cell hangs (one rank skipped a collective), the ranks are killed, and
those notes are what is left to say which rank waited where.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import io
import json
import math
import shutil
import tempfile
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

from dpviz.analysis.scan import TraceScan, read_trace, shift
from dpviz.core.config import require_int, validate_world_size
from dpviz.core.record import Span
from dpviz.engine.launch import Cluster, RankContext, RankTimeout
from dpviz.engine.profile_events import profiler
from dpviz.lessons.cells.records import (
    CELL_FILE, CellLine, CellRecord, CellTimeout, DEFAULT_TIMEOUT_S, RankFailure, Waiting,
)

# torch.distributed's calls that wait for other ranks (and so can hang a cell)
COLLECTIVES = frozenset({
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier",
    "monitored_barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list"})

_NAMESPACE: dict[str, Any] = {}   # this rank's cell variables, kept between cells


# --- inside a rank: where the cell is --------------------------------------------------------

class Notes:
    """This rank's one-line note of where its cell is, rewritten at each change (a file, so it
    outlives a rank killed mid-collective)."""

    def __init__(self, folder: str, rank: int):
        self.path = Path(folder) / f"rank{rank}.json"

    def write(self, state: str, op: str | None = None, line: int | None = None,
              message: str = "") -> None:
        self.path.write_text(json.dumps({"state": state, "op": op, "line": line, "message": message}))


def read_note(folder: str, rank: int, source: str) -> Waiting:
    """Where `rank` last said its cell `source` was ("running" if it never wrote)."""
    try:
        note = json.loads((Path(folder) / f"rank{rank}.json").read_text())
    except (OSError, ValueError):
        return Waiting(rank, "running")
    return Waiting(rank, note["state"], note["op"], line_of(source, note["line"]) if note["line"] else None,
                   note["message"])


def cell_line() -> int | None:
    """The cell line the innermost cell frame of the caller's stack is on."""
    frame = inspect.currentframe()
    while frame is not None and frame.f_code.co_filename != CELL_FILE:
        frame = frame.f_back
    return None if frame is None else frame.f_lineno


def line_of(source: str, number: int) -> CellLine:
    lines = source.splitlines()
    return CellLine(number, lines[number - 1].strip() if 0 < number <= len(lines) else "")


class NotedDist:
    """torch.distributed as the cell sees it: the same functions, but each collective notes
    on entry that the rank is in it (and at which cell line), and that it left. (A cell that
    imports torch.distributed itself calls it unnoted: a hang then names no collective.)"""

    def __init__(self, dist, notes: Notes):
        self._dist, self._notes = dist, notes

    def __getattr__(self, name: str):
        attr = getattr(self._dist, name)
        if name not in COLLECTIVES:
            return attr

        def noted(*args, **kwargs):
            self._notes.write("in", name, cell_line())
            result = attr(*args, **kwargs)
            self._notes.write("running")
            return NotedWork(result, self, name) if hasattr(result, "wait") else result

        return noted


class NotedWork:
    """An async collective's handle (`isend`, `async_op=True`): its `wait` is where it waits."""

    def __init__(self, work, dist: NotedDist, op: str):
        self._work, self._dist, self._op = work, dist, op

    def wait(self, *args, **kwargs):
        self._dist._notes.write("in", f"{self._op} (its wait)", cell_line())
        done = self._work.wait(*args, **kwargs)
        self._dist._notes.write("running")
        return done

    def __getattr__(self, name: str):
        return getattr(self._work, name)


# --- inside a rank: running the cell ---------------------------------------------------------

def compile_cell(source: str):
    """(code of all but the last statement, code of the last expression or None): the last
    expression is evaluated apart so its value can be shown, as IPython does."""
    tree = ast.parse(source, CELL_FILE)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = compile(ast.Expression(tree.body.pop().value), CELL_FILE, "eval")
    return compile(tree, CELL_FILE, "exec"), last


def failure_of(exc: BaseException, source: str) -> RankFailure:
    """The cell's own frames of an exception (never dpviz's or torch's), and its message."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == CELL_FILE]
    return RankFailure(tuple(line_of(source, f.lineno) for f in frames),
                       "".join(traceback.format_exception_only(type(exc), exc)).strip())


def namespace(ctx: RankContext, notes: Notes) -> dict[str, Any]:
    """This rank's cell namespace, made on its first cell."""
    if not _NAMESPACE:
        import torch
        import torch.distributed as dist

        _NAMESPACE.update(rank=ctx.rank, world_size=ctx.world_size, torch=torch,
                          dist=NotedDist(dist, notes), __name__="__main__")
    return _NAMESPACE


def execute(source: str, names: dict[str, Any]) -> tuple[str | None, RankFailure | None]:
    """Run the cell in `names`: (repr of its last expression's value or None, its failure)."""
    body, last = compile_cell(source)
    try:
        exec(body, names)
        value = eval(last, names) if last is not None else None
    except Exception as exc:
        return None, failure_of(exc, source)
    if value is None:
        return None, None
    names["_"] = value
    return repr(value), None


def run_cell_rank(ctx: RankContext, source: str, ranks: tuple[int, ...], record: bool,
                  notes_dir: str) -> dict | None:
    """Task: run the cell if this rank is one of `ranks`; its output, value, failure, time,
    and with `record` the path of its profile's chrome trace."""
    if ctx.rank not in ranks:
        return None
    notes = Notes(notes_dir, ctx.rank)
    names = namespace(ctx, notes)
    notes.write("running")
    out = io.StringIO()
    began = time.perf_counter()
    with (profiler(ctx, record_shapes=True) if record else contextlib.nullcontext()) as prof, \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        value, failure = execute(source, names)
    wall_ms = (time.perf_counter() - began) * 1e3
    if failure is None:
        notes.write("done")
    else:
        notes.write("raised", line=failure.frames[-1].line if failure.frames else None,
                    message=failure.message)
    trace = None
    if record:
        trace = str(Path(ctx.workdir) / f"cell-rank{ctx.rank}.json")
        prof.export_chrome_trace(trace)
    return {"output": out.getvalue(), "value": value, "wall_ms": wall_ms, "trace": trace,
            "failure": dataclasses.asdict(failure) if failure else None}


# --- in the kernel -----------------------------------------------------------------------------

def check_ranks(ranks, world_size: int) -> tuple[int, ...]:
    """The ranks a cell runs on: all of them (None), or distinct ranks of this cluster."""
    if ranks is None:
        return tuple(range(world_size))
    ranks = tuple(ranks)
    if not ranks:
        raise ValueError("--rank names no rank: give one or more, e.g. --rank 0 or --rank 0,1")
    for r in ranks:
        require_int("--rank", r, 0, world_size - 1, f" (the ranks are 0 to {world_size - 1})")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"--rank names a rank twice: {ranks}")
    return ranks


def check_timeout(timeout_s) -> float:
    """A cell's time limit in seconds: a positive, finite number."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {timeout_s!r}")
    return float(timeout_s)


class CellRanks:
    """`world_size` warm ranks that run notebook cells (`run`), each keeping its variables
    from cell to cell, until a cell hangs or fails beyond recovery (then they restart clean)."""

    def __init__(self, world_size: int):
        self.cluster = Cluster(validate_world_size(world_size, minimum=1))
        self.notes_dir = tempfile.mkdtemp(prefix="dpviz-cells-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.notes_dir, True)

    @property
    def world_size(self) -> int:
        return self.cluster.world_size

    def start(self) -> float:
        """Start the ranks (if they are not up); returns how long their last start took (s)."""
        self.cluster.start()
        return self.cluster.start_seconds

    def close(self) -> None:
        self.cluster.close()
        self._cleanup()

    def run(self, source: str, ranks=None, timeout_s: float = DEFAULT_TIMEOUT_S,
            record: bool = False) -> CellRecord:
        """Run `source` on `ranks` (default: all) at once; a SyntaxError or a bad argument is
        raised before any rank sees it, a cell still running after `timeout_s` raises
        CellTimeout (the ranks are then restarted by the next cell)."""
        ranks = check_ranks(ranks, self.world_size)
        timeout_s = check_timeout(timeout_s)
        compile_cell(source)
        try:
            results = self.cluster.run_task(run_cell_rank, source, ranks, record, self.notes_dir,
                                            timeout_s=timeout_s)
        except RankTimeout:
            raise CellTimeout([read_note(self.notes_dir, r, source) for r in ranks], timeout_s) from None
        return assemble_cell(source, self.world_size, ranks, results)


def assemble_cell(source: str, world_size: int, ranks: tuple[int, ...], results: list) -> CellRecord:
    """The ranks' answers as one record; recorded spans on one clock from the cell's start."""
    mine = {r: results[r] for r in ranks}
    return CellRecord(
        source=source, world_size=world_size, ranks=ranks,
        outputs={r: res["output"] for r, res in mine.items()},
        values={r: res["value"] for r, res in mine.items() if res["value"] is not None},
        failures={r: RankFailure(tuple(CellLine(**f) for f in res["failure"]["frames"]),
                                 res["failure"]["message"])
                  for r, res in mine.items() if res["failure"]},
        wall_ms={r: res["wall_ms"] for r, res in mine.items()},
        recorded=any(res["trace"] for res in mine.values()),
        spans=cell_spans({r: res["trace"] for r, res in mine.items() if res["trace"]}))


def cell_spans(traces: dict[int, str]) -> tuple[Span, ...]:
    """Each rank's trace read by dpviz's one trace parser, shifted so the cell's first event
    is 0; a cell has no DDP buckets, so its all-reduces carry none."""
    spans = []
    for rank, path in traces.items():
        scan = TraceScan()
        for ev in read_trace(path)["traceEvents"]:
            scan.add(ev)
        Path(path).unlink()
        spans += [dataclasses.replace(s, bucket=None) for s in scan.spans(rank)]
    origin = min((s.start_us for s in spans), default=0.0)
    return tuple(sorted(shift(spans, origin), key=lambda s: (s.rank, s.start_us)))

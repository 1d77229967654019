"""What one `%%ranks` cell did on each rank: its output, its errors, and (recorded) its spans.

Torch-free: a recorded cell saves as JSON (`dpviz.save`) and renders without ranks. The
errors a cell raises in the kernel are built here from what the ranks reported, so a
learner reads their own failing line and never a dpviz frame.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from dpviz.analysis.scan import COMM_KINDS
from dpviz.core.record import Span, record_kind

CELL_FILE = "<%%ranks cell>"   # the file name a cell is compiled under, so its frames are found
DEFAULT_TIMEOUT_S = 5.0         # a cell still running after this is stopped (a hang, most likely)


@dataclass(frozen=True)
class CellLine:
    """One line of the learner's cell (1-based, as in the cell) and its text."""

    line: int
    text: str


@dataclass(frozen=True)
class RankFailure:
    """How a cell failed on one rank: the cell's frames, innermost last, and the exception."""

    frames: tuple[CellLine, ...]
    message: str      # e.g. "ValueError: boom"


@record_kind("cell")
@dataclass(frozen=True)
class CellRecord:
    """One cell run on live ranks. `spans` (µs, from the cell's first event on any rank, one
    clock for all ranks) are empty unless the cell was `recorded` and ran torch operations."""

    source: str
    world_size: int
    ranks: tuple[int, ...]                    # the ranks that ran the cell
    outputs: dict[int, str]                   # rank → what it printed
    values: dict[int, str] = field(default_factory=dict)   # rank → repr of the last expression
    failures: dict[int, RankFailure] = field(default_factory=dict)
    wall_ms: dict[int, float] = field(default_factory=dict)  # rank → time running the cell
    recorded: bool = False                   # run under the profiler (`--record`)
    spans: tuple[Span, ...] = ()


@dataclass(frozen=True)
class Waiting:
    """Where a rank was when its cell ran out of time: in a collective (`op` at `at`), done,
    failed, or running something else (`op` None)."""

    rank: int
    state: str                  # "in" (a collective), "running", "done", "raised"
    op: str | None = None
    at: CellLine | None = None
    message: str = ""


@dataclass(frozen=True)
class CollectiveTiming:
    """The k-th collective of a recorded cell on every rank that ran it: when each rank
    entered it and how long it waited there for the last rank to arrive (ms)."""

    index: int
    op: str
    bytes: int | None
    start_ms: dict[int, float]
    dur_ms: dict[int, float]

    @property
    def wait_ms(self) -> dict[int, float]:
        last = max(self.start_ms.values())
        return {r: last - start for r, start in self.start_ms.items()}


def collective_timings(record: CellRecord) -> list[CollectiveTiming]:
    """The cell's collectives matched across ranks by order (every rank runs the same
    sequence; a send and its recv are the same step on either side)."""
    by_rank: dict[int, list[Span]] = defaultdict(list)
    for s in sorted(record.spans, key=lambda s: s.start_us):
        if s.kind in COMM_KINDS:
            by_rank[s.rank].append(s)
    count = max((len(v) for v in by_rank.values()), default=0)
    out = []
    for k in range(count):
        mine = {r: spans[k] for r, spans in by_rank.items() if k < len(spans)}
        first = next(iter(mine.values()))
        out.append(CollectiveTiming(k, first.op or first.kind, first.bytes,
                                    {r: s.start_us / 1e3 for r, s in mine.items()},
                                    {r: s.dur_us / 1e3 for r, s in mine.items()}))
    return out


def describe_cell(record: CellRecord) -> str:
    """One line per collective of a recorded cell: op, size, each rank's time in it and how
    much of that was waiting for the last rank to arrive."""
    if not record.recorded:
        return "not recorded: run the cell with %%ranks --record"
    if not record.spans:
        return "the cell ran no torch operation: nothing to draw"
    rows = collective_timings(record)
    if not rows:
        return "the cell ran no collective"
    return "\n".join(
        f"{t.op}{f' {t.bytes} B' if t.bytes is not None else ''}: " + ", ".join(
            f"rank {r} {t.dur_ms[r]:.2f} ms ({t.wait_ms[r]:.2f} waiting)" for r in sorted(t.dur_ms))
        for t in rows)


# --- errors the kernel raises, IPython shows them without dpviz's frames -------------------

class CellError(RuntimeError):
    """A cell raised on some ranks: `.ranks` names them; the message shows each one's
    failing cell line. IPython prints `_render_traceback_()` instead of a traceback."""

    def __init__(self, failures: dict[int, RankFailure]):
        self.ranks = sorted(failures)
        lines = []
        for rank in self.ranks:
            failure = failures[rank]
            lines += [f"[{rank}]   cell line {f.line}: {f.text}" for f in failure.frames]
            lines.append(f"[{rank}] {failure.message}")
        super().__init__(f"the cell raised on rank(s) {', '.join(map(str, self.ranks))}:\n"
                         + "\n".join(lines))

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


class CellTimeout(CellError, TimeoutError):
    """A cell that did not finish in time: `.ranks` the ranks still running it, the message
    what each rank was doing (waiting in which collective, at which line)."""

    def __init__(self, where: list[Waiting], timeout_s: float):
        self.ranks = [w.rank for w in where if w.state in ("in", "running")]
        RuntimeError.__init__(self, "\n".join([
            f"the cell did not finish within {timeout_s:g} s on rank(s) "
            f"{', '.join(map(str, self.ranks))}:", *map(_waiting_line, where),
            "All ranks were stopped: the next cell starts fresh ones (their variables are gone)."]))


def _waiting_line(w: Waiting) -> str:
    at = f" at cell line {w.at.line}: {w.at.text}" if w.at else ""
    return {"in": f"[{w.rank}] waiting in {w.op}{at}",
            "running": f"[{w.rank}] still running, in no collective",
            "done": f"[{w.rank}] finished the cell",
            "raised": f"[{w.rank}] raised {w.message}{at}"}[w.state]

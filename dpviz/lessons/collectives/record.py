"""Records of collectives run on live ranks: "collective" (an all-reduce algorithm step by
step) and "primitives" (torch.distributed's primitives, before and after).

Plain numbers only, no torch: a recorded ring renders in a plot, a widget or a manim scene
on a machine with no ranks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dpviz.core.record import record_kind
from dpviz.lessons.exercises.records import Verdict

ITEMSIZE = 4  # every recorded collective moves float32


@dataclass(frozen=True)
class Transfer:
    """One point-to-point message of one step: `src` sends chunk `chunk` to `dst`."""

    src: int
    dst: int
    chunk: int
    op: str                   # "add": dst sums the payload into its chunk; "copy": dst overwrites it
    carries: tuple[int, ...]  # ranks whose inputs the payload sums (sorted)
    nbytes: int
    forward: bool = False     # payload is what src received in the previous step, not its chunk


@dataclass(frozen=True)
class Step:
    """One step of an algorithm: its messages are in flight at the same time."""

    index: int
    phase: str                # reduce_scatter | all_gather (ring), reduce | broadcast (others)
    transfers: tuple[Transfer, ...]
    # rank → chunk → element values after this step (empty in a schedule that did not run)
    values: tuple[tuple[tuple[float, ...], ...], ...] = ()


@record_kind("collective")
@dataclass(frozen=True)
class CollectiveRecord:
    """An all-reduce algorithm executed step by step, and how it compared with torch's own."""

    algorithm: str            # ring | ring-unchunked | tree | naive
    world_size: int
    elements: int
    chunks: tuple[tuple[int, int], ...]          # [start, stop) element range of each chunk
    inputs: tuple[tuple[float, ...], ...]        # rank → its input before step 0
    steps: tuple[Step, ...]
    bytes_sent_per_rank: tuple[int, ...]
    matches_all_reduce: bool | None = None       # None: not checked (e.g. the numpy model)
    max_abs_diff: float | None = None            # vs dist.all_reduce on the same inputs
    source: str = "live"                         # "live" (gloo ranks) or "model" (numpy)

    @property
    def total_bytes(self) -> int:
        """S: the size of one rank's buffer in bytes."""
        return self.elements * ITEMSIZE

    @property
    def result(self) -> tuple[tuple[float, ...], ...]:
        """rank → its whole buffer after the last step."""
        return tuple(tuple(v for chunk in rank for v in chunk) for rank in self.steps[-1].values)


@dataclass(frozen=True)
class PrimitiveRun:
    """One torch.distributed primitive on every rank. An empty tuple: the rank has no tensor
    in that role (a scatter's non-root inputs, a gather's non-root outputs)."""

    name: str
    root: int | None
    before: tuple[tuple[float, ...], ...]                 # rank → input values
    after: tuple[tuple[float, ...], ...]                  # rank → output values
    before_from: tuple[tuple[tuple[int, ...], ...], ...]  # rank → element → ranks it came from
    after_from: tuple[tuple[tuple[int, ...], ...], ...]
    arrive_ms: tuple[float, ...] = ()                     # barrier: when each rank got there
    leave_ms: tuple[float, ...] = ()                      # barrier: when each rank went on


@record_kind("primitives")
@dataclass(frozen=True)
class PrimitivesRecord:
    """Every primitive, run once on the same live ranks."""

    world_size: int
    elements: int
    runs: tuple[PrimitiveRun, ...] = field(default=())

    def get(self, name: str) -> PrimitiveRun:
        for run in self.runs:
            if run.name == name:
                return run
        raise ValueError(f"no primitive {name!r} in this record; it has "
                         f"{', '.join(r.name for r in self.runs)}")


def describe_collective(record: CollectiveRecord) -> str:
    """A few lines a person can check: steps, bytes per rank against the formula, the check."""
    n, s = record.world_size, record.total_bytes
    ring_bytes = 2 * (n - 1) / n * s
    sent = record.bytes_sent_per_rank
    check = {None: "not checked", True: "yes", False: "NO"}[record.matches_all_reduce]
    lines = [f"{record.algorithm} on {n} ranks ({record.source}), {record.elements} float32 "
             f"(S = {s} B) in {len(record.chunks)} chunk(s): {len(record.steps)} steps",
             f"bytes sent per rank: {', '.join(map(str, sent))} "
             f"(mean {sum(sent) / n:g} B = {sum(sent) / n / s:.3g}·S; a chunked ring: "
             f"2(N−1)/N·S = {ring_bytes:g} B)",
             f"equals dist.all_reduce: {check}"
             + ("" if record.max_abs_diff is None else f" (max |diff| {record.max_abs_diff:g})")]
    return "\n".join(lines)


# --- the exercise's check, as the report and its figure read it ---------------------------

@dataclass(frozen=True)
class RingSend:
    """One `comm.isend` of a ring attempt; [start, stop) is where in `buf` the payload
    lives (None: the payload is not a view of `buf`, e.g. a forwarded receive buffer)."""

    step: int              # 0-based: the sends of step k produce frame k + 1
    src: int
    dst: int
    nbytes: int
    start: int | None = None
    stop: int | None = None


@dataclass(frozen=True)
class RingRun:
    """A ring all-reduce, frame by frame: frame 0 is the inputs, frame k the state after step k."""

    source: str                                          # "live" (your code) | "model" (dpviz's ring)
    world_size: int
    elements: int
    chunks: tuple[tuple[int, int], ...]                  # the reference's chunk borders
    frames: tuple[tuple[tuple[float, ...], ...], ...]    # frame → rank → values
    holds: tuple[tuple[tuple[tuple[int, ...], ...], ...], ...]  # frame → rank → element → ranks summed
    sends: tuple[RingSend, ...]
    steps_per_rank: tuple[int, ...]
    bytes_sent_per_rank: tuple[int, ...]


@record_kind("ring_exercise")
@dataclass(frozen=True)
class RingCheck:
    verdict: Verdict
    reference: RingRun
    yours: RingRun | None = None
    first_diff: int | None = None    # the first frame where yours and the reference differ

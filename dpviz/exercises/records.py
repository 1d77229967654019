"""What an exercise check recorded, as plain data: the verdict and what the figure draws.

No torch here: a saved check renders on a machine with no ranks.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..record import record_kind

EXERCISE_FACADE = ("Verdict",)  # what `dpviz.exercises.<name>` offers from here


YOURS = "your code"
STARTER = "the shipped solution, in place of the starter"
FORCED = "the shipped solution (DPVIZ_SOLUTIONS=1)"
NO_FUNCTION = "the shipped solution, no function given"
NOTHING = "nothing yet"

# Why a check did not look at the learner's code, by `Verdict.checked`: the head of its text.
_NOT_CHECKED = {
    STARTER: "still the starter",
    FORCED: "DPVIZ_SOLUTIONS=1 runs the shipped solution in place of yours",
    NO_FUNCTION: "no function given",
    "the shipped solution": "the shipped solution ran in place of yours",   # records saved before the split
}


TEXT_WIDTH = 100   # characters: a notebook's output breaks longer lines anywhere, mid-word too


def wrapped(line: str, width: int = TEXT_WIDTH) -> str:
    """`line` broken at spaces into lines of at most `width` characters (longer words whole);
    continuation lines are indented, so a wrapped line reads as one."""
    import textwrap

    return textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


@dataclass(frozen=True)
class Verdict:
    """The checker's answer in words: pass, or the first thing wrong and how to fix it."""

    exercise: str
    passed: bool
    checked: str          # YOURS, STARTER, FORCED, NO_FUNCTION or NOTHING: whose code ran
    mistake: str = ""     # a short name for a known mistake ("" when passed or unnamed)
    message: str = ""     # what is wrong, with the numbers that show it
    hint: str = ""

    @property
    def status(self) -> str:
        """PASS or NOT YET for the learner's code; NOT CHECKED when theirs did not run, so an
        untouched starter never reads PASS."""
        if self.checked != YOURS:
            return "NOT CHECKED"
        return "PASS" if self.passed else "NOT YET"

    def text(self) -> str:
        if self.checked == YOURS:
            head = f"{self.exercise} (your code): {self.status}"
        elif self.checked == NOTHING:
            head = f"{self.exercise}: NOT CHECKED"
        else:
            why = _NOT_CHECKED.get(self.checked, f"{self.checked} ran in place of yours")
            head = (f"{self.exercise}: NOT CHECKED — {why} "
                    f"(the shipped solution {'passes' if self.passed else 'fails'})")
        lines = [head] + ([self.message] if self.message else [])
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(wrapped(line) for text in lines for line in text.splitlines())


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


@dataclass(frozen=True)
class GradientRun:
    """Per parameter: the gradient's norm relative to the right one (1 = right)."""

    names: tuple[str, ...]
    norm_ratio: tuple[float, ...]       # ‖gradient‖ / ‖expected‖, rank 0
    max_diff: tuple[float, ...]         # max |gradient − expected| over ranks
    tolerance: tuple[float, ...]        # the largest allowed difference (float32 rounding)


@record_kind("hook_exercise")
@dataclass(frozen=True)
class HookCheck:
    verdict: Verdict
    world_size: int
    yours: GradientRun | None = None
    unsynced_ratio: tuple[float, ...] = ()   # ‖rank 0's own gradient‖ / ‖expected‖: no communication


@dataclass(frozen=True)
class BucketCase:
    """One model's gradients, packed by you and by torch (parameter indices per bucket)."""

    model: str
    bucket_cap_mb: float | None
    param_bytes: tuple[int, ...]                 # in parameter (definition) order
    torch: tuple[tuple[int, ...], ...]           # torch's own (torch_gate.bucket_assignment)
    yours: tuple[tuple[int, ...], ...] = ()


@record_kind("buckets_exercise")
@dataclass(frozen=True)
class BucketsCheck:
    verdict: Verdict
    cases: tuple[BucketCase, ...]
    first_diff: int | None = None                # the first case where yours differs

    @property
    def yours(self) -> BucketCase | None:
        return None if self.first_diff is None else self.cases[self.first_diff]


@dataclass(frozen=True)
class AccumulationRun:
    """One optimizer step of K micro-steps: what the comm hook saw, and the gradient."""

    all_reduces_per_micro: tuple[int, ...]     # buckets all-reduced in each micro-step (rank 0)
    sync_flag_in_hook: tuple[bool, ...] = ()   # ddp.require_backward_grad_sync in early micro-steps' hooks
    norm_ratio: float = 0.0                    # ‖gradient‖ / ‖reference‖ (1 right, K without 1/K)
    max_diff: float = 0.0
    tolerance: float = 0.0


@record_kind("accumulation_exercise")
@dataclass(frozen=True)
class AccumulationCheck:
    verdict: Verdict
    accum_steps: int
    reference: AccumulationRun | None = None     # dpviz's run loop on the same micro-batches
    yours: AccumulationRun | None = None


@dataclass(frozen=True)
class Zero1Run:
    """Your ZeRO-1 steps beside plain Adam: per rank, |difference| along the flat parameters
    and the bytes your `state` held."""

    world_size: int
    psi: int                                      # parameters in the flat vector
    steps: int
    abs_diff: tuple[tuple[float, ...], ...]       # rank → element → |yours − plain Adam|
    tolerance: float
    state_bytes: tuple[int, ...]                  # rank → bytes of tensors in your state
    all_gathers: tuple[int, ...]                  # rank → comm.all_gather calls


@record_kind("zero1_exercise")
@dataclass(frozen=True)
class Zero1Check:
    verdict: Verdict
    yours: Zero1Run | None = None

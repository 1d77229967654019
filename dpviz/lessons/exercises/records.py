"""What an exercise check recorded, as plain data: the verdict and what the figure draws.

No torch here: a saved check renders on a machine with no ranks.
"""
from __future__ import annotations

from dataclasses import dataclass


EXERCISE_FACADE = ("Verdict",)  # what `dpviz.lessons.exercises.<name>` offers from here


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



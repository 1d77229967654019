"""Show a check: its verdict in words, and the figure of where it went wrong."""
from __future__ import annotations

EXERCISE_FACADE = ("report",)  # what `dpviz.exercises.<name>` offers from here


def report(check):
    """Print the verdict; when it failed on code that ran, draw yours beside the reference
    and return the Figure (None otherwise)."""
    from . import plots as figures

    print(check.verdict.text())
    if check.verdict.passed or getattr(check, "yours", None) is None:
        return None
    return figures.plot_check(check)

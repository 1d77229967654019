"""What a live slider's status line says about a move's timing: the run's link wait and peer
wait, and the spread of every run at that setting so far.

One move is one run, and on a shared CPU one run's exposed communication varies a lot from
run to run (a slower peer, not the link, makes most of it: `analysis.stragglers.exposed_split`).
A move stays one run, to stay quick; the line says which part of its wait was the link's and
which a slower peer's, and from the second run at a setting on, how far that setting's link
waits spread (min-max, with the median), so two moves compare against their spread and not
against one lucky or unlucky run.
"""
from __future__ import annotations

import statistics
from typing import Any, Callable, Hashable


class SettingSpread:
    """Link waits per setting, as a panel's moves record them. `split(record)` gives a run's
    (link wait, peer wait) in ms."""

    def __init__(self, split: Callable[[Any], tuple[float, float]]):
        self.split = split
        self.seen: dict[Hashable, list[float]] = {}

    def note(self, setting: Hashable, record: Any) -> str:
        """This run's link and peer wait, then the setting's spread so far (or that there is
        none yet)."""
        link, peer = self.split(record)
        runs = self.seen.setdefault(setting, [])
        runs.append(link)
        head = f"link wait {link:.1f} ms, peer wait {peer:.1f} ms"
        if len(runs) == 1:
            return f"{head} (first run here: move back to see its spread)"
        return (f"{head}; {len(runs)} runs here: link wait {min(runs):.1f}-{max(runs):.1f} ms, "
                f"median {statistics.median(runs):.1f}")

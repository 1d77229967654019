"""FSDP's knobs as a panel: reshard_after_forward, prefetching, unit granularity and the link's
bandwidth; every change re-runs the step live through the `run` it is given and says what
changed (peak bytes, exposed communication, all-gathers per step). No torch here:
`dpviz.lessons.fsdp.live.fsdp_knobs` binds `run` to warm ranks."""
from __future__ import annotations

import time
from typing import Callable, Sequence

import ipywidgets as w

from dpviz.core.config import WARMUP_SAMPLES
from dpviz.lessons.fsdp.plots import plot_fsdp_step
from dpviz.lessons.fsdp.records import (
    FsdpKnobs, FsdpRecord, GRANULARITIES, KEPT_NOTE, check_knobs, describe_change, describe_knobs, summarize,
)
from dpviz.widgets.recorded import recordable
from dpviz.widgets.slider import FigurePanel, say, start_ranks, starts_note, status_line
from dpviz.widgets.spread import SettingSpread

FIGSIZE = (11, 5.6)
# what a move's light run (`dpviz.lessons.fsdp.live._run_knobs`) leaves out, said where its time is
LIGHT_NOTE = f"; a light run: the warm-up step before the drawn one trains {WARMUP_SAMPLES} samples per rank, no link wait"
# a toggle as wide as its label: ipywidgets' fixed width cut "reshard after for…", "keep until backw…"
WHOLE_LABELS = {"button_width": "auto"}
UNIT_LABELS = {"block": "a unit per block", "model": "the model as one unit"}


def light_note(record: FsdpRecord) -> str:
    """What a move's light run left out, and whether its ranks trained a model kept from an
    earlier move (restored, not built and warmed up just before the drawn step)."""
    if record.config.get("warmup") != "light":
        return ""
    return LIGHT_NOTE + (f"; {KEPT_NOTE}" if KEPT_NOTE in record.notes else "")


def _waits(record: FsdpRecord) -> tuple[float, float]:
    """A run's (link wait, peer wait), ms, means over its ranks."""
    summary = summarize(record)
    return summary.link_wait_ms, summary.peer_wait_ms


def fsdp_panel(run: Callable[[FsdpKnobs, float], FsdpRecord], knobs: FsdpKnobs, gbps: Sequence[float],
               value: float, cluster=None) -> w.VBox:
    """Toggles for reshard_after_forward and prefetching, a choice of unit, a bandwidth slider
    (Gb/s, over `gbps`, starting at `value`); each change calls `run(knobs, gbps)` and redraws
    the step it recorded. The status line says how long the move took (and whether it
    restarted ranks: `cluster`), the run's link and peer wait with the spread of that setting's
    runs so far (`dpviz.widgets.spread`), and what changed against the previous run."""
    check_knobs(knobs)
    if value not in gbps:
        raise ValueError(f"value {value} is not one of {list(gbps)}")
    reshard = w.ToggleButtons(options=[("reshard after forward", True), ("keep until backward", False)],
                              value=knobs.reshard_after_forward, description="params", style=WHOLE_LABELS)
    prefetch = w.ToggleButtons(options=[("prefetch on", True), ("prefetch off", False)], value=knobs.prefetch,
                               description="prefetch", style=WHOLE_LABELS)
    units = w.ToggleButtons(options=[(UNIT_LABELS[g], g) for g in GRANULARITIES], value=knobs.units,
                            description="units", style=WHOLE_LABELS)
    bandwidth = w.SelectionSlider(options=[(f"{g:g}", g) for g in gbps], value=value, description="link Gb/s",
                                  continuous_update=False, style={"description_width": "initial"})
    figure = FigurePanel(lambda ax, record: plot_fsdp_step(record, ax=ax), FIGSIZE, caption=True)
    status, change = status_line(), status_line()
    last: list[FsdpRecord] = []
    spread = SettingSpread(_waits)

    def update(_=None) -> None:
        chosen = FsdpKnobs(reshard.value, prefetch.value, units.value)
        what = f"{describe_knobs(chosen)}, {bandwidth.value:g} Gb/s"
        say(status, f"running {what} on live ranks…")
        t0, starts = time.perf_counter(), cluster.starts if cluster is not None else 0
        try:
            start_ranks(cluster, status, f"running {what}")
            record = run(chosen, bandwidth.value)
        except Exception as err:   # shown, not swallowed: the panel says why
            say(status, f"{what}: {type(err).__name__}: {err}")
            raise
        t1 = time.perf_counter()
        figure.show(record)
        say(status, f"{what}: re-ran live in {t1 - t0:.2f} s{starts_note(cluster, starts)}, drawn in "
                    f"{time.perf_counter() - t1:.2f} s{light_note(record)}; "
                    f"{spread.note((chosen, bandwidth.value), record)}")
        say(change, describe_change(last[-1] if last else None, record))
        last[:] = [record]

    for control in (reshard, prefetch, units, bandwidth):
        control.observe(update, names="value")
    update()
    panel = w.VBox([w.HBox([reshard, prefetch]), w.HBox([units, bandwidth]), status, change, figure.caption,
                    figure.widget])
    # recorded for a site: every knob's product; the change line compares with the run before,
    # which a page moved by hand does not follow
    return recordable(panel, "FSDP knobs", controls=[reshard, prefetch, units, bandwidth],
                      views=[status, figure.caption, figure.widget], live_only=[change])

"""FSDP's knobs as a panel: reshard_after_forward, prefetching, unit granularity and the link's
bandwidth; every change re-runs the step live through the `run` it is given and says what
changed (peak bytes, exposed communication, all-gathers per step). No torch here:
`dpviz.lessons.fsdp.live.fsdp_knobs` binds `run` to warm ranks."""
from __future__ import annotations

import time
from typing import Callable, Sequence

import ipywidgets as w

from dpviz.lessons.fsdp.plots import plot_fsdp_step
from dpviz.lessons.fsdp.records import (
    FsdpKnobs, FsdpRecord, GRANULARITIES, check_knobs, describe_change, describe_knobs,
)
from dpviz.widgets.recorded import recordable
from dpviz.widgets.slider import FigurePanel, starts_note

FIGSIZE = (11, 5.6)
UNIT_LABELS = {"block": "a unit per block", "model": "the model as one unit"}


def fsdp_panel(run: Callable[[FsdpKnobs, float], FsdpRecord], knobs: FsdpKnobs, gbps: Sequence[float],
               value: float, cluster=None) -> w.VBox:
    """Toggles for reshard_after_forward and prefetching, a choice of unit, a bandwidth slider
    (Gb/s, over `gbps`, starting at `value`); each change calls `run(knobs, gbps)` and redraws
    the step it recorded. The status line says how long the move took (and whether it
    restarted ranks: `cluster`), and what changed against the previous run."""
    check_knobs(knobs)
    if value not in gbps:
        raise ValueError(f"value {value} is not one of {list(gbps)}")
    reshard = w.ToggleButtons(options=[("reshard after forward", True), ("keep until backward", False)],
                              value=knobs.reshard_after_forward, description="params")
    prefetch = w.ToggleButtons(options=[("prefetch on", True), ("prefetch off", False)], value=knobs.prefetch,
                               description="prefetch")
    units = w.ToggleButtons(options=[(UNIT_LABELS[g], g) for g in GRANULARITIES], value=knobs.units,
                            description="units")
    bandwidth = w.SelectionSlider(options=[(f"{g:g}", g) for g in gbps], value=value, description="link Gb/s",
                                  continuous_update=False)
    figure = FigurePanel(lambda ax, record: plot_fsdp_step(record, ax=ax), FIGSIZE, caption=True)
    status, change = w.Label(), w.Label()
    last: list[FsdpRecord] = []

    def update(_=None) -> None:
        chosen = FsdpKnobs(reshard.value, prefetch.value, units.value)
        what = f"{describe_knobs(chosen)}, {bandwidth.value:g} Gb/s"
        status.value = f"running {what} on live ranks…"
        t0, starts = time.perf_counter(), cluster.starts if cluster is not None else 0
        try:
            record = run(chosen, bandwidth.value)
        except Exception as err:   # shown, not swallowed: the panel says why
            status.value = f"{what}: {type(err).__name__}: {err}"
            raise
        t1 = time.perf_counter()
        figure.show(record)
        status.value = (f"{what}: re-ran live in {t1 - t0:.2f} s{starts_note(cluster, starts)}, drawn in "
                        f"{time.perf_counter() - t1:.2f} s")
        change.value = describe_change(last[-1] if last else None, record)
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

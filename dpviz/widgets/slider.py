"""Two panels every subject builds on: step through a record, or re-run on a knob change.

Widgets hold no torch code: `rerun` takes a callable that returns a record (usually a
`functools.partial` of a dpviz run function bound to a warm Cluster), and a draw function.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import ipywidgets as w
import matplotlib.pyplot as plt
from IPython.display import display


class _Figure:
    """An Output area redrawn by a `draw(ax, value)` function."""

    def __init__(self, draw: Callable[[Any, Any], None], figsize: tuple[float, float]):
        self.draw, self.figsize = draw, figsize
        self.out = w.Output(layout=w.Layout(min_height=f"{int(figsize[1] * 72)}px"))

    def show(self, value: Any) -> None:
        with self.out:
            self.out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=self.figsize, layout="constrained")
            self.draw(ax, value)
            display(fig)  # works under any backend (plt.show(fig) does not)
            plt.close(fig)


def stepper(n: int, draw: Callable[[Any, int], None], label: str = "step",
            figsize: tuple[float, float] = (9, 3.5), interval_ms: int = 900) -> w.VBox:
    """Play button + slider over `n` recorded steps; `draw(ax, i)` draws step i."""
    if n < 1:
        raise ValueError("nothing to step through: the record has no steps")
    figure = _Figure(draw, figsize)
    play = w.Play(min=0, max=n - 1, interval=interval_ms, description="play")
    slider = w.IntSlider(min=0, max=n - 1, description=label, continuous_update=True)
    w.jslink((play, "value"), (slider, "value"))
    slider.observe(lambda change: figure.show(change["new"]), names="value")
    figure.show(0)
    return w.VBox([w.HBox([play, slider]), figure.out])


def rerun(values: Sequence[Any], run: Callable[[Any], Any], draw: Callable[[Any, Any], None],
          label: str, value: Any = None, figsize: tuple[float, float] = (9, 3.5),
          format_value: Callable[[Any], str] = str) -> w.VBox:
    """A slider over `values`; each release re-runs `run(value)` live and draws its record.
    `format_value` names each value on the slider (e.g. 'one bucket' rather than 4096.0)."""
    figure = _Figure(draw, figsize)
    slider = w.SelectionSlider(options=[(format_value(v), v) for v in values],
                               value=value if value is not None else values[0],
                               description=label, continuous_update=False,
                               style={"description_width": "initial"},   # the whole label shows
                               layout=w.Layout(width="460px"))
    status = w.Label()

    def update(choice: Any) -> None:
        status.value = f"running {label}={format_value(choice)} on live ranks…"
        t0 = time.perf_counter()
        try:
            record = run(choice)
        except Exception as err:  # a failed run is shown, not swallowed: the panel says why
            status.value = f"{label}={format_value(choice)}: {type(err).__name__}: {err}"
            raise
        status.value = f"{label}={format_value(choice)}: re-ran live in {time.perf_counter() - t0:.2f} s"
        figure.show(record)

    slider.observe(lambda change: update(change["new"]), names="value")
    update(slider.value)
    return w.VBox([w.HBox([slider, status]), figure.out])

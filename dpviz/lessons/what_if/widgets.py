"""Notebook 16's what-if panel: sliders for N, link, cap and K redraw the predicted step and
the scaling curve from one recorded step. No ranks start: every move is the model alone."""
from __future__ import annotations

import time
from typing import Sequence

import ipywidgets as w

from dpviz.core.link import PRESETS, preset
from dpviz.lessons.what_if.learn import LearnedStep, learn
from dpviz.lessons.what_if.plots import plot_predicted, plot_scaling
from dpviz.lessons.what_if.records import SCALING_CAPS, PredictedStep, Scaling, WORLD_SIZES, predict, scaling
from dpviz.widgets.recorded import Apart, recordable, recording_tag
from dpviz.widgets.slider import FigurePanel, say, status_line

PANEL_KS = (1, 2, 4, 8)


def _draw_step(ax, prediction) -> None:
    plot_predicted(prediction, ax=ax)


def _draw_scaling(ax, table: Scaling) -> None:
    plot_scaling(table, ax=ax)


def same_buckets_note(before: PredictedStep | None, after: PredictedStep) -> str:
    """For a cap move: '; cap 25 → 100 MiB changes nothing: …' when both caps pack the
    gradients into the same buckets (e.g. all of them fit one bucket under the smaller cap
    already), read from the two predictions' bucket layouts; '' for any other move."""
    if before is None or before.config["bucket_cap_mb"] == after.config["bucket_cap_mb"]:
        return ""
    if [b.gradients for b in before.buckets] != [b.gradients for b in after.buckets]:
        return ""
    n = len(after.buckets)
    sizes = ": " + ", ".join(f"{b.bytes / 2**20:.2f}" for b in after.buckets) + " MiB" if n <= 4 else ""
    verdict = "changes nothing" if before.step_ms == after.step_ms else "leaves the buckets as they were"
    return (f"; cap {before.config['bucket_cap_mb']:g} → {after.config['bucket_cap_mb']:g} MiB {verdict}: "
            f"the buckets are the same at both caps ({n} bucket{'s' * (n != 1)}{sizes})")


def what_if_panel(record, *, world_sizes: Sequence[int] = WORLD_SIZES, links: Sequence[str] = tuple(PRESETS),
                  caps: Sequence[float] = SCALING_CAPS, ks: Sequence[int] = PANEL_KS, wire: str = "ring",
                  value: tuple[int, str, float, int] | None = None) -> w.VBox:
    """Sliders over N, the link preset, the bucket cap and K: each move predicts the step
    from `record` (a live record, a loaded trace, or what `learn` made of one) and redraws
    it, and the scaling curve for that link and K (computed once per link and K, then kept).
    The status line says how long the move took, and when a cap move changes nothing, why.
    While a site is built (`dpviz.widgets.recorded`), N × link × K is recorded at the start's
    cap, and apart from them cap × link at the start's N and K: the four together would make
    the page four times the size."""
    learned = record if isinstance(record, LearnedStep) else learn(record)
    n0, link0, cap0, k0 = value or (world_sizes[min(3, len(world_sizes) - 1)], links[0], caps[-2], ks[0])
    for name, chosen, options in (("world size", n0, world_sizes), ("link", link0, links), ("cap", cap0, caps),
                                  ("K", k0, ks)):
        if chosen not in options:
            raise ValueError(f"{name} {chosen!r} is not one of {list(options)}")
    resolved = {name: preset(name) for name in links}
    tables: dict[tuple[str, int], Scaling] = {}
    step_figure = FigurePanel(_draw_step, (11, 3.4))
    scaling_figure = FigurePanel(_draw_scaling, (9, 3.6))
    style = {"description_width": "initial"}
    n = w.SelectionSlider(options=list(world_sizes), value=n0, description="ranks N", style=style,
                          continuous_update=False)
    link = w.Dropdown(options=list(links), value=link0, description="link", style=style)
    cap = w.SelectionSlider(options=[(f"{c:g} MiB", c) for c in caps], value=cap0, description="bucket cap",
                            style=style, continuous_update=False)
    k = w.SelectionSlider(options=list(ks), value=k0, description="K micro-steps", style=style,
                          continuous_update=False)
    status = status_line()
    shown: list = [None]   # the (link, K) whose scaling curve is drawn: N and cap leave it as it is
    last: list[PredictedStep | None] = [None]   # the prediction drawn before this move

    def predicted(cap_mb: float) -> PredictedStep:
        return predict(learned, world_size=n.value, link=resolved[link.value], bucket_cap_mb=cap_mb,
                       accum_steps=k.value, wire=wire)

    def compared() -> PredictedStep | None:
        """What a cap move is compared with: the prediction before it; while a site records,
        the next smaller cap's (a recorded view is reached from any position, not the walk's)."""
        if recording_tag() is None:
            return last[0]
        i = list(caps).index(cap.value)
        return predicted(caps[i - 1]) if i else None

    def update(_=None) -> None:
        t0 = time.perf_counter()
        key = (link.value, k.value)
        if key not in tables:
            tables[key] = scaling(learned, link=resolved[link.value], world_sizes=world_sizes, caps=caps,
                                  wire=wire, accum_steps=k.value)
        prediction = predicted(cap.value)
        step_figure.show(prediction)
        if shown[0] != key:
            scaling_figure.show(tables[key])
            shown[0] = key
        say(status, f"N={n.value}, {link.value}, cap {cap.value:g} MiB, K={k.value}: predicted step "
                    f"{prediction.step_ms:.1f} ms (exposed communication {prediction.exposed_comm_ms:.1f} ms)"
                    f"{same_buckets_note(compared(), prediction)}; predicted and drawn in "
                    f"{time.perf_counter() - t0:.2f} s, no ranks started")
        last[0] = prediction

    for control in (n, link, cap, k):
        control.observe(update, names="value")
    update()
    panel = w.VBox([w.HBox([n, link]), w.HBox([cap, k]), status, step_figure.widget, scaling_figure.widget])
    return recordable(panel, "what-if panel", controls=[n, link, k],
                      views=[status, step_figure.widget, scaling_figure.widget],
                      note=f"at a {cap.value:g} MiB bucket cap (the cap moves the view below)",
                      apart=[Apart([cap, link], [status, step_figure.widget],
                                   note=f"at N = {n.value}, K = {k.value}, as the panel starts")])


def move_seconds(panel: w.VBox, moves: int = 4) -> list[float]:
    """Time `moves` slider moves of a `what_if_panel` (N to its next option and back, in
    turn), as the notebook prints them: seconds per move, predicted and drawn. The panel ends
    at the N it started at (an odd count takes one more, untimed move back): the panel shows
    what the code that built it asked for, not where a timing loop left it."""
    n = panel.children[0].children[0]
    options, start = list(n.options), n.value
    i = options.index(start)
    other = options[i + 1] if i + 1 < len(options) else options[i - 1]
    out = []
    for _ in range(moves):
        t0 = time.perf_counter()
        n.value = other if n.value == start else start
        out.append(time.perf_counter() - t0)
    n.value = start
    return out

"""Panels recorded for the course site (`dpviz.widgets.recorded`): without the build's variable
a panel stays live; with it, every position is run once, its views copied under the tag into
Stacks jslink-ed to the controls, and the controls end where they started."""
from __future__ import annotations

import ipywidgets as w
import pytest

from dpviz.widgets.recorded import (
    ENV, MOVES_PREFIX, PANEL_CLASS, STACK_PREFIX, TAG_CLASS, VIEW_CLASS, Apart, gridded, recordable, walk,
)
from dpviz.widgets.slider import rerun

TAG = "recorded at build time on a test machine, 2026-01-01"


def _links(stack: w.Stack) -> list[tuple]:
    """The (control, trait) pairs jslink-ed to `stack`'s selected_index, as the widget state a
    page embeds has them: the links the browser runs."""
    state = w.Widget.get_manager_state()["state"].values()
    return [tuple(s["state"]["source"]) for s in state if s["model_name"] == "LinkModel"
            and s["state"]["target"] == [f"IPY_MODEL_{stack.model_id}", "selected_index"]]


def test_without_the_variable_a_panel_stays_live(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    runs = []
    panel = rerun([1, 2, 3], lambda v: runs.append(v) or v, lambda ax, v: ax.plot([0, v]), "x", value=2)
    assert runs == [2]                                  # the first state only
    assert not any(isinstance(c, w.Stack) for c in panel.children)


def test_a_slider_records_each_value_once_and_ends_where_it_started(monkeypatch):
    monkeypatch.setenv(ENV, TAG)
    runs = []
    panel = rerun([1, 2, 3], lambda v: runs.append(v) or v, lambda ax, v: ax.plot([0, v]), "x", value=2)
    slider, stack = panel.children[0].children[0], panel.children[-1]
    # the first state, the two others, then back to the first (the page opens there)
    assert runs == [2, 1, 3, 2]
    assert slider.value == 2 and stack.selected_index == 1 == slider.index
    assert _links(stack) == [(f"IPY_MODEL_{slider.model_id}", "index")]
    assert PANEL_CLASS in stack._dom_classes
    tags, statuses, figures = [], [], []
    for value, view in zip([1, 2, 3], stack.children):
        tag, status, caption, image = view.children
        assert VIEW_CLASS in view._dom_classes and TAG_CLASS in tag._dom_classes
        tags.append(tag.value)
        statuses.append(status.value)
        figures.append(bytes(image.value))
        assert f">x={value}: " in status.value             # the status line, as `say` wraps it
    assert all(TAG in t and "live" not in t for t in tags)
    assert len(set(figures)) == 3                       # each value drew its own line
    # the live status line and figure left the panel: the page shows only recorded views
    assert [type(c).__name__ for c in panel.children] == ["HBox", "Stack"]
    assert panel.children[0].children == (slider,)


def test_two_controls_record_their_product_once_each(monkeypatch):
    monkeypatch.setenv(ENV, TAG)
    toggle = w.ToggleButtons(options=["a", "b"], value="b")
    slider = w.SelectionSlider(options=[10, 20, 30], value=10)
    status, outer_only, runs = w.Label(), w.Label(), []

    def update(_=None) -> None:
        runs.append((toggle.value, slider.value))
        status.value = f"{toggle.value}{slider.value}"
        outer_only.value = toggle.value

    for control in (toggle, slider):
        control.observe(update, names="value")
    update()
    panel = recordable(w.VBox([w.HBox([toggle, slider]), status, outer_only]), "test",
                       controls=[toggle, slider], views=[status, outer_only])
    outer = panel.children[-1]
    assert sorted(set(runs)) == sorted(runs[:6]) and len(set(runs)) == 6   # each pair ran
    assert len(runs) == 6 + 1          # one extra: back to the start after the walk
    assert (toggle.value, slider.value) == ("b", 10) and runs[-1] == ("b", 10)
    assert outer.selected_index == 1 and _links(outer) == [(f"IPY_MODEL_{toggle.model_id}", "index")]
    for i, t in enumerate("ab"):
        inner = outer.children[i]
        assert inner.selected_index == 0 and _links(inner) == [(f"IPY_MODEL_{slider.model_id}", "index")]
        assert [v.children[1].value for v in inner.children] == [f"{t}{s}" for s in (10, 20, 30)]
        # a view the inner control leaves as it was is one widget, saved once with the page
        assert len({id(v.children[2]) for v in inner.children}) == 1


def _key(stack: w.Stack) -> str:
    return next(c[len(STACK_PREFIX):] for c in stack._dom_classes if c.startswith(STACK_PREFIX))


def _moved_by(control: w.Widget) -> set[str]:
    """The keys of the Stacks `control` is marked to move (what scripts/check_site.py moves)."""
    return {c[len(MOVES_PREFIX):] for c in control._dom_classes if c.startswith(MOVES_PREFIX)}


def test_controls_recorded_apart_get_a_stack_of_their_own_below_their_row(monkeypatch):
    monkeypatch.setenv(ENV, TAG)
    a, b = w.SelectionSlider(options=[1, 2, 3], value=1), w.SelectionSlider(options=[10, 20, 30], value=20)
    shared, status = w.ToggleButtons(options=["x", "y"], value="x"), w.Label()

    def update(_=None) -> None:
        status.value = f"{a.value}{shared.value}{b.value}"

    for control in (a, shared, b):
        control.observe(update, names="value")
    update()
    panel = recordable(w.VBox([w.HBox([a, shared]), status, w.HBox([b])]), "test", controls=[a, shared],
                       views=[status], note="b at 20", apart=[Apart([b, shared], [status], note="a at 1")])
    row_a, first, row_b, second = panel.children           # each Stack under its controls' row
    assert row_a.children == (a, shared) and row_b.children == (b,)
    # the product of each group's positions, the other controls at their start
    assert [[v.children[1].value for v in inner.children] for inner in first.children] == [
        [f"{i}{t}20" for t in "xy"] for i in (1, 2, 3)]
    assert [[v.children[1].value for v in inner.children] for inner in second.children] == [
        [f"1{t}{j}" for t in "xy"] for j in (10, 20, 30)]
    assert first.children[0].children[0].children[0].value.endswith("; b at 20</span>")
    assert second.children[0].children[0].children[0].value.endswith("; a at 1</span>")
    assert _links(first) == [(f"IPY_MODEL_{a.model_id}", "index")]
    assert _links(second) == [(f"IPY_MODEL_{b.model_id}", "index")]
    # the page moves each Stack's own controls; the shared one moves both
    assert _moved_by(a) == {_key(first)} and _moved_by(b) == {_key(second)}
    assert _moved_by(shared) == {_key(first), _key(second)} and _key(first) != _key(second)
    assert (a.value, shared.value, b.value) == (1, "x", 20)   # the page opens where the notebook left it


def test_a_continuous_knob_is_recorded_on_its_stated_grid(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    knob = w.FloatLogSlider(value=7.5, base=10, min=-1, max=3, description="Ψ")
    assert gridded(knob, (1.5, 70.0)) is knob                # live: any value moves it
    monkeypatch.setenv(ENV, TAG)
    grid = gridded(knob, (70.0, 1.5))
    assert isinstance(grid, w.SelectionSlider) and (grid.value, grid.description) == (7.5, "Ψ")
    assert grid.options == (("1.5", 1.5), ("7.5", 7.5), ("70", 70.0))   # its start joins the grid
    status = w.Label()
    grid.observe(lambda change: setattr(status, "value", f"Ψ={change['new']}"), names="value")
    panel = recordable(w.VBox([grid, status]), "test", controls=[grid], views=[status])
    views = panel.children[-1].children
    assert [v.children[1].value for v in views] == ["Ψ=1.5", "", "Ψ=70.0"]   # the start: as built
    tag = views[0].children[0].value
    assert "; Ψ on a grid (1.5, 7.5, 70); other values with a kernel" in tag


def test_the_walk_visits_every_combination_once_one_move_at_a_time():
    sizes, starts = (2, 3, 4), (1, 2, 0)
    seq = list(walk(sizes, starts))
    assert seq[0] == starts and len(seq) == len(set(seq)) == 2 * 3 * 4
    assert all(sum(a != b for a, b in zip(x, y)) == 1 for x, y in zip(seq, seq[1:]))


def test_a_control_without_an_index_is_refused(monkeypatch):
    monkeypatch.setenv(ENV, TAG)
    knob = w.FloatSlider()
    with pytest.raises(TypeError, match="FloatSlider has no index"):
        recordable(w.VBox([knob, w.Label()]), "test", controls=[knob], views=[])


def test_a_recorded_figure_keeps_its_size_and_look_in_fewer_bytes():
    import io

    import numpy as np
    from matplotlib.figure import Figure
    from PIL import Image

    from dpviz.widgets.recorded import palette_png

    figure = Figure(figsize=(6, 3), dpi=100)
    ax = figure.add_subplot()
    ax.barh([0, 1, 2], [3, 1, 2], color=["C0", "C1", "C2"])
    ax.set_title("a figure of flat colours")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    original = buffer.getvalue()
    small = palette_png(original)
    before, after = (np.asarray(Image.open(io.BytesIO(b)).convert("RGB"), dtype=int) for b in (original, small))
    assert after.shape == before.shape and len(small) < len(original)
    # 256 colours spread evenly would be cells of 256 / 256 ** (1/3) ≈ 40 levels a channel, a
    # pixel at most half a cell from its colour; the octree spends its colours where the
    # pixels are (the flat colours), so it does no worse, and the flat areas (most pixels)
    # keep their colour to a level
    error = np.abs(after - before).max(axis=2)
    assert error.max() <= 20
    assert (error <= 1).mean() > 0.9


def test_progress_goes_to_the_build_log_not_to_the_notebook(monkeypatch, tmp_path, capfd):
    from dpviz.widgets.recorded import LOG_ENV

    monkeypatch.setenv(ENV, TAG)
    monkeypatch.setenv(LOG_ENV, str(tmp_path / "progress.log"))
    slider, status = w.SelectionSlider(options=[1, 2]), w.Label()
    slider.observe(lambda change: setattr(status, "value", str(change["new"])), names="value")
    recordable(w.VBox([slider, status]), "a slider", controls=[slider], views=[status])
    out, err = capfd.readouterr()        # the kernel's streams: what a page would print
    assert out == err == ""
    assert (tmp_path / "progress.log").read_text().splitlines()[0] == "  a slider: recording 2 positions"


def test_book_gives_kernels_the_progress_file_by_its_absolute_path(monkeypatch, tmp_path):
    """`make book` passes `out/book/recording.log`, relative to the checkout, while its kernels
    run in notebooks/: a relative path there named no file, and the first panel raised."""
    import os
    from pathlib import Path

    from dpviz.app.book import recording_widgets
    from dpviz.widgets.recorded import LOG_ENV

    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    with recording_widgets("tag", Path("out/recording.log"), log=lambda line: None):
        given = Path(os.environ[LOG_ENV])
        assert given.is_absolute() and given == tmp_path / "out" / "recording.log"
        monkeypatch.chdir(tmp_path / "out")       # where a kernel would run: the file is still found
        assert given.is_file()

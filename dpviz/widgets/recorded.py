"""Panels that move without a kernel: every position recorded when the site is built.

`dpviz book` executes the notebooks with `DPVIZ_RECORD_WIDGETS` set to a tag ("recorded at
build time on <machine>, <date>"). A panel built then is moved through each of its positions
at once, by setting its controls: its own observers re-run it, on the warm ranks the notebook
uses. Each position's views (figure, caption, status line) are copied into plain widgets, and
a `Stack` of those copies, one level per control, has its `selected_index` jslink-ed to the
control's index. The page's widget manager (the html-manager myst-nb embeds) runs those links
from the saved widget state, so a move shows its recorded view with no server. Without the
variable (JupyterLab, nbval) a panel is returned as built: every move re-runs live.

A continuous knob has no index to follow: `gridded` makes it a slider over a stated grid while
recording. Where the product of every control's positions would outgrow the site, some
controls are recorded `Apart`: a Stack of their own, the panel's other controls at their start.
"""
from __future__ import annotations

import html
import io
import math
import os
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import ipywidgets as w

# ENV's value is the tag each recorded view shows (figures' own stamps read it too: `style.tag`)
from dpviz.plots.style import RECORDING_ENV as ENV, recording_tag

LOG_ENV = "DPVIZ_RECORD_LOG"   # a file the progress lines are appended to (`dpviz book` shows them)
# the page's classes scripts/check_site.py finds a recorded panel, its views and their tag by
PANEL_CLASS, VIEW_CLASS, TAG_CLASS = "dpviz-recorded", "dpviz-recorded-view", "dpviz-recorded-tag"
# a recorded Stack's own class is STACK_PREFIX + key; each control it follows has MOVES_PREFIX + key
STACK_PREFIX, MOVES_PREFIX = "dpviz-stack-", "dpviz-moves-"
GRID_CLASS = "dpviz-grid"      # a control `gridded` made: its tag states the grid
_GRIDDED: "weakref.WeakSet[w.Widget]" = weakref.WeakSet()   # the controls `gridded` made


@dataclass(frozen=True)
class Apart:
    """Controls recorded in a Stack of their own, showing `views`, with the panel's other
    controls where they start: the product of every control's positions would outgrow the
    site. `note` says in the views' tag what those others hold (e.g. "at Ψ = 7.5 B")."""

    controls: Sequence[w.Widget]
    views: Sequence[w.Widget | None]
    note: str = ""


def gridded(slider: w.Widget, grid: Sequence[float], label: Callable[[float], str] = "{:g}".format) -> w.Widget:
    """`slider` as built, or while recording a SelectionSlider over `grid` and the slider's own
    value, with its description: a continuous knob has no index a recorded Stack can follow.
    The page states the grid in the tag of the views it moves; with a kernel any value runs."""
    if recording_tag() is None:
        return slider
    values = sorted({*grid, slider.value})
    grid_slider = w.SelectionSlider(options=[(label(v), v) for v in values], value=slider.value,
                                    description=slider.description, style=slider.style, continuous_update=False)
    grid_slider.add_class(GRID_CLASS)
    _GRIDDED.add(grid_slider)
    return grid_slider


def grid_note(control: w.Widget) -> str:
    """'Ψ (billion) on a grid (1.5, 7.5, 70)' for a `gridded` control, else ''."""
    if control not in _GRIDDED:
        return ""
    return f"{control.description} on a grid ({', '.join(label for label, _ in control.options)})"


def positions(control: w.Widget) -> tuple[str, int]:
    """The trait a Stack's index follows (`index` of a selection, `value` of an IntSlider
    from 0 in steps of 1) and how many positions it has. Other controls (a float slider) have
    no index a jslink can follow: record them on a stated grid of options instead."""
    if isinstance(control, (w.SelectionSlider, w.ToggleButtons, w.Dropdown)):
        return "index", len(control.options)
    if isinstance(control, w.IntSlider) and control.min == 0 and control.step == 1:
        return "value", control.max + 1
    raise TypeError(f"{type(control).__name__} has no index a recorded Stack can follow")


def recordable(panel: w.Box, name: str, controls: Sequence[w.Widget], views: Sequence[w.Widget | None],
               live_only: Sequence[w.Widget] = (), note: str = "", apart: Sequence[Apart] = ()) -> w.Box:
    """`panel` as built, or, while recording, `panel` with the views and `live_only` taken out
    and a Stack of every position's recorded `views` (the product of `controls`' positions)
    put below the row of its last control; each `Apart` group's Stack likewise, below its own.
    `note`: what the views hold that their controls do not say (in their tag, after the grids).
    `live_only`: views that mean nothing recorded (a change against the previous run)."""
    tag = recording_tag()
    if tag is None:
        return panel
    groups = [Apart(controls, views, note), *apart]
    t0, count = time.perf_counter(), sum(math.prod(positions(c)[1] for c in g.controls) for g in groups)
    _progress(f"  {name}: recording {count} position{'s' * (count != 1)}")
    stacks = [_record_group(group, tag) for group in groups]
    _prune(panel, {id(v) for g in groups for v in g.views if v is not None} | set(map(id, live_only)))
    for group, stack in zip(groups, stacks):
        _place(panel, stack, group.controls, stacks)
    _progress(f"  {name}: {count} positions recorded in {time.perf_counter() - t0:.1f} s")
    return panel


def _record_group(group: Apart, tag: str) -> w.Widget:
    """The group's Stack of recorded views, each under the tag line, marked for the page: the
    Stack by its key, each control it follows by the same key (scripts/check_site.py moves
    those). The controls end where they started."""
    views = [v for v in group.views if v is not None]
    grids = [n for n in map(grid_note, group.controls) if n]
    notes = [*grids, *(["other values with a kernel (JupyterLab)"] if grids else []), group.note]
    line = "; ".join(n for n in (tag, *notes) if n)
    tag_line = w.HTML(f'<span style="color:#666;font-size:smaller">{html.escape(line)}</span>')
    tag_line.add_class(TAG_CLASS)
    kept: dict[tuple, w.Widget] = {}   # one copy of equal views: the page stores it once

    def snapshot() -> w.VBox:
        view = w.VBox([tag_line, *(_copy(v, kept) for v in views)])
        view.add_class(VIEW_CLASS)
        return view

    stack = _record(list(group.controls), snapshot)
    stack.add_class(PANEL_CLASS)
    stack.add_class(STACK_PREFIX + stack.model_id)
    for control in group.controls:
        control.add_class(MOVES_PREFIX + stack.model_id)
    return stack


def _place(panel: w.Box, stack: w.Widget, controls: Sequence[w.Widget], stacks: Sequence[w.Widget]) -> None:
    """Put `stack` in `panel` below the row that holds the last of its `controls` (and below
    the `stacks` already put there): each recorded view sits under the controls that move it."""
    def holds(child: w.Widget) -> bool:
        return any(child is c for c in controls) or (
            isinstance(child, w.Box) and not isinstance(child, w.Stack) and any(map(holds, child.children)))

    children = list(panel.children)
    at = max((i for i, c in enumerate(children) if holds(c) or any(c is s for s in stacks)),
             default=len(children) - 1)
    panel.children = (*children[:at + 1], stack, *children[at + 1:])


def _record(controls: list[w.Widget], snapshot: Callable[[], w.Widget]) -> w.Widget:
    """The views at every combination of the controls' positions, as nested Stacks (the first
    control the outermost), each jslink-ed to its control. The controls walk the combinations
    one move at a time (`walk`): one re-run each, then back to where they started."""
    traits = [positions(c)[0] for c in controls]
    starts = tuple(getattr(c, t) for c, t in zip(controls, traits))
    views, at = {}, starts
    for here in walk([positions(c)[1] for c in controls], starts):
        for control, trait, old, new in zip(controls, traits, at, here):
            if new != old:
                setattr(control, trait, new)   # the panel's observers re-run and redraw it
        views[here], at = snapshot(), here
    for control, trait, old, new in zip(controls, traits, at, starts):
        if new != old:
            setattr(control, trait, new)       # the page opens where the notebook left it
    return _stacks(controls, traits, views, ())


def walk(sizes: Sequence[int], starts: tuple[int, ...]):
    """Every combination of positions (`sizes[k]` for control k) once, from `starts`, each one
    a single control's move from the one before (a reflected mixed-radix Gray code, the last
    control the fastest): a live panel re-runs once per combination."""
    orders = [[s, *(j for j in range(n) if j != s)] for n, s in zip(sizes, starts)]
    digits, steps = [0] * len(sizes), [1] * len(sizes)
    yield starts
    for _ in range(math.prod(sizes) - 1):
        for k in reversed(range(len(sizes))):
            if 0 <= digits[k] + steps[k] < sizes[k]:
                digits[k] += steps[k]
                break
            steps[k] = -steps[k]   # this control turns round; the next one out moves
        yield tuple(order[d] for order, d in zip(orders, digits))


def _stacks(controls, traits, views: dict, prefix: tuple[int, ...]) -> w.Widget:
    """The Stack for `prefix`'s positions of the first controls (a view when all are set)."""
    if len(prefix) == len(controls):
        return views[prefix]
    k = len(prefix)
    control, trait = controls[k], traits[k]
    children = [_stacks(controls, traits, views, (*prefix, i)) for i in range(positions(control)[1])]
    stack = w.Stack(children, selected_index=getattr(control, trait))
    w.jslink((control, trait), (stack, "selected_index"))
    return stack


def _copy(view: w.Widget, kept: dict[tuple, w.Widget]) -> w.Widget:
    """A copy of what `view` shows now; the copy made before when it showed the same (a
    scaling curve the moved knob leaves as it was is one widget, shown at many positions).
    A copy is made only when needed: every widget the kernel makes is saved with the page."""
    key = (type(view).__name__, bytes(view.value) if isinstance(view, w.Image) else view.value)
    if key not in kept:
        kept[key] = freeze(view)
    return kept[key]


def freeze(view: w.Widget) -> w.Widget:
    """A plain widget showing what `view` (an Image, Label or HTML) shows now."""
    width = w.Layout(width=view.layout.width) if view.layout.width else w.Layout()
    if isinstance(view, w.Image):
        value = palette_png(bytes(view.value)) if view.format == "png" else bytes(view.value)
        return w.Image(value=value, format=view.format, layout=width)
    if isinstance(view, (w.Label, w.HTML)):
        return type(view)(value=view.value, layout=width)
    raise TypeError(f"cannot record a {type(view).__name__}: record an Image, Label or HTML showing it")


def palette_png(png: bytes) -> bytes:
    """A PNG as 256 colours (PIL's fast octree) at the same size: a figure of flat colours and
    antialiased lines keeps its look (a channel moves by at most a few percent, on edges) in
    about a third of the bytes, and a site holds hundreds of them (README: its size budget)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    out = io.BytesIO()
    image.quantize(256, method=Image.Quantize.FASTOCTREE).save(out, "PNG", optimize=True)
    return out.getvalue()


def _prune(box: w.Box, drop: set[int]) -> None:
    """Take the widgets whose id is in `drop` out of `box` and the boxes inside it."""
    box.children = tuple(c for c in box.children if id(c) not in drop)
    for child in box.children:
        if isinstance(child, w.Box):
            _prune(child, drop)

def _progress(line: str) -> None:
    """A progress line appended to the file LOG_ENV names, which `dpviz book` shows as it grows.
    Not the kernel's stderr: ipykernel sends even its low-level writes to the notebook's
    outputs, and the page would print them."""
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as log:
            log.write(line + "\n")

"""Can every label be read? Text artists of a drawn figure whose boxes overlap.

Figures are drawn from live data, so where labels land changes with every run: a check on
the drawn figure (matplotlib's own text extents) catches collisions no fixed layout rule can.
"""
from __future__ import annotations

import functools
from weakref import WeakKeyDictionary

import numpy as np
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from dpviz.plots import mpl_gate
from dpviz.plots.style import COLUMN_IN


_drawn_on: WeakKeyDictionary = WeakKeyDictionary()   # figure → the canvas it was last drawn on here
_asked: WeakKeyDictionary = WeakKeyDictionary()      # figure → how often `drawn_renderer` served it


def drawn_renderer(fig: Figure):
    """The renderer of `fig` after a draw of the figure as it is now. Each check below measures
    a drawn figure; when nothing changed since this last drew it on the same canvas (matplotlib
    marks a figure `stale` as soon as any of its artists changes) it is not drawn again, so the
    checks run one after another over one figure draw it once, not once each."""
    if fig.stale or _drawn_on.get(fig) is not fig.canvas:
        fig.canvas.draw()
        _drawn_on[fig] = fig.canvas
    _asked[fig] = _asked.get(fig, 0) + 1
    return fig.canvas.get_renderer()


def _measures(check):
    """A check that reads a drawn figure and changes nothing leaves it as fresh as it found it,
    or as its own `drawn_renderer` left it. Measuring recomputes what a draw computed (tick
    labels placed again, an annotation's position) and matplotlib marks the figure stale at
    each such set, though each value is the one the draw set."""
    @functools.wraps(check)
    def measured(fig: Figure, *args, **kwargs):
        fresh = not fig.stale and _drawn_on.get(fig) is fig.canvas
        asked = _asked.get(fig, 0)
        out = check(fig, *args, **kwargs)
        if fresh or _asked.get(fig, 0) > asked:
            fig.stale = False
        return out
    return measured


@_measures
def visible_texts(fig: Figure) -> list[Text]:
    """Every non-empty text the figure draws: titles, axis and tick labels, legends,
    annotations, texts placed in axes. Call after a draw: tick labels count only for the
    ticks drawn (a locator also makes ticks outside the view), and an axes turned off
    (`ax.axis("off")`) draws none of its axis texts."""
    undrawn = _undrawn_axis_texts(fig)
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
            and t.figure is fig and t.get_alpha() != 0 and id(t) not in undrawn]


def _undrawn_axis_texts(fig: Figure) -> set[int]:
    """ids of the axis texts matplotlib keeps but does not draw."""
    skip: set[int] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            ticks = axis.majorTicks + axis.minorTicks
            every = {id(t) for tick in ticks for t in (tick.label1, tick.label2)}
            if not ax.axison or not axis.get_visible():
                skip |= every | {id(axis.label), id(axis.offsetText)}
                continue
            drawn = {id(t) for tick in mpl_gate.drawn_ticks(axis) for t in (tick.label1, tick.label2)}
            skip |= every - drawn
    return skip


@_measures
def overlapping_texts(fig: Figure, pad_px: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of labels whose rendered boxes overlap by more than `pad_px` pixels each way
    (touching edges are fine). Draws the figure if it changed since it was last drawn."""
    renderer = drawn_renderer(fig)
    boxes = []
    for text in visible_texts(fig):
        box = text.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            boxes.append((text.get_text(), box))
    out = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            dx = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            dy = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if dx > pad_px and dy > pad_px:
                out.append((a, b))
    return out


HIDDEN = "hidden: "   # the label of a text `place_labels` had to hide, followed by why


def place_labels(texts: list[Text], why: str, shifts_pt: tuple[tuple[float, float], ...] = ((0, 0),),
                 avoid_bars: bool = False, avoid_markers: bool = False) -> list[Text]:
    """Place each text (in the given order, most important first) at the first of `shifts_pt`
    (offsets in points from where it was put) where it overlaps no text placed before it
    (and, with `avoid_bars`, no filled bar of the figure: a label that belongs beside the bars
    is not read on top of one; with `avoid_markers`, no line's marker: a point's label beside
    its point, not on it); a text that fits nowhere is hidden, labelled `HIDDEN + why`
    so checks can say which and why. Returns the hidden ones. Data decides where labels land,
    so this runs on the drawn, laid-out figure: moving a label is tried before hiding it."""
    from matplotlib.transforms import offset_copy

    if not texts:
        return []
    fig = texts[0].figure
    _lay_out(fig)
    renderer = fig.canvas.get_renderer()
    placing = set(map(id, texts))   # every other label of the figure is an obstacle too
    kept = Boxes(text_extent(t, renderer) for t in visible_texts(fig) if id(t) not in placing)
    if avoid_bars:
        for ax in {t.axes for t in texts if t.axes is not None}:
            kept.add_rows(bar_extents(ax)[0])
    if avoid_markers:
        for ax in {t.axes for t in texts if t.axes is not None}:
            kept.add_rows(marker_extents(ax))
    hidden = []
    for text in texts:
        base = text.get_transform()
        for dx, dy in shifts_pt:
            if (dx, dy) != (0, 0):
                text.set_transform(offset_copy(base, fig=fig, x=dx, y=dy, units="points"))
            box = text_extent(text, renderer)
            if not kept.overlap(box):
                kept.add(box)
                break
        else:
            text.set_transform(base)
            text.set_visible(False)
            text.set_label(HIDDEN + why)
            hidden.append(text)
    return hidden


_LAID_OUT: WeakKeyDictionary = WeakKeyDictionary()   # text → (what lays it out, its layout's box)


def text_extent(text: Text, renderer) -> Bbox:
    """`text.get_window_extent(renderer)`, the same box, with the text's layout kept while what
    lays it out holds: a slider's tick labels are the same texts saying the same move after
    move, and laying each out again was most of the time `place_labels` spent on obstacles.
    A label tried at several places, then checked against a slider's frame
    (`dpviz.widgets.frame.touches`), is laid out once. Where this matplotlib cannot lay a text
    out apart from measuring it (`mpl_gate.layout_state`), it is measured every time."""
    state = mpl_gate.layout_state(text)
    if state is None or not text.get_visible() or text.get_wrap() or text.get_usetex() or not text.get_text():
        return text.get_window_extent(renderer)
    key = (id(renderer), text.figure.dpi, text.get_text(), tuple(text.get_fontproperties().__dict__.values()),
           text.get_rotation(), text.get_rotation_mode(), text.get_ha(), text.get_va(), *state,
           text.get_parse_math(), text.get_antialiased())
    kept = _LAID_OUT.get(text)
    if kept is None or kept[0] != key:
        kept = _LAID_OUT[text] = (key, mpl_gate.layout_box(text, renderer))
    x, y = text.get_transform().transform(text.get_unitless_position())
    return kept[1].translated(x, y)


class Boxes:
    """Placed labels' boxes, tested all at once: a 24-bucket timeline places ~50 labels among
    ~70, and `Bbox.overlaps` one pair at a time was most of a knob move's label placement.
    `overlap` is `any(box.overlaps(b) for b in boxes)`: edges that touch overlap."""

    def __init__(self, boxes=()):
        self.extents = np.array([_sorted(b) for b in boxes], dtype=float).reshape(-1, 4)

    def overlap(self, box) -> bool:
        return self.overlap_any(np.array([_sorted(box)]))

    def overlap_any(self, boxes: np.ndarray) -> bool:
        """Whether any of `boxes`, (n, 4) rows of (x0, y0, x1, y1) with x0 <= x1 and y0 <= y1,
        overlaps any of these."""
        e, b = self.extents[None, :, :], boxes[:, None, :]
        return bool(np.any((e[..., 2] >= b[..., 0]) & (e[..., 0] <= b[..., 2])
                           & (e[..., 3] >= b[..., 1]) & (e[..., 1] <= b[..., 3])))

    def add(self, box) -> None:
        self.add_rows(np.array([_sorted(box)]))

    def add_rows(self, rows: np.ndarray) -> None:
        """Add (n, 4) rows of (x0, y0, x1, y1), each already ordered."""
        self.extents = np.vstack([self.extents, rows])


def _sorted(box) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1) with x0 <= x1 and y0 <= y1, as `Bbox.overlaps` orders them."""
    (x0, y0), (x1, y1) = box.get_points()
    return min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)


def _lay_out(fig: Figure) -> None:
    """Put every label where it will be drawn before measuring (every other label is an
    obstacle). A figure whose layout engine still has to solve (constrained, tight) is laid
    out by a draw that renders no pixels. One whose axes positions are kept (a knob's
    figure redrawn in place, `dpviz.widgets.slider`) only needs its pending autoscale
    applied: the data transforms then hold, and tick labels are placed by
    `visible_texts`; this skips a whole second draw on every move."""
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    engine = fig.get_layout_engine()
    if engine is not None and not isinstance(engine, PlaceHolderLayoutEngine):
        fig.draw_without_rendering()
        return
    for ax in fig.axes:
        ax.apply_aspect()
        ax.autoscale_view()


def hidden_texts(fig: Figure) -> list[tuple[str, str]]:
    """(text, why) of every label `place_labels` hid in the figure."""
    return [(t.get_text(), t.get_label()[len(HIDDEN):]) for t in fig.findobj(Text)
            if not t.get_visible() and str(t.get_label()).startswith(HIDDEN)]


# --- labels on bars, small type --------------------------------------------------------------

MIN_FONT_PT = 7.0        # smaller type is not read at a glance (a notebook shows figures at ~100 dpi)
MIN_CONTRAST = 3.0       # WCAG's ratio for large text and graphics: a label must stand out of its bar


def bar_boxes(ax) -> list[tuple[Bbox, tuple]]:
    """(display box, RGBA face colour) of every filled bar the axes draws: Rectangles and the
    rectangles of polygon collections (`dpviz.plots.bars.hbars`), not bands (`fill_between`)
    that labels are meant to sit on; in drawing order. Call after a draw."""
    extents, faces = bar_extents(ax)
    return [(Bbox.from_extents(*e), face) for e, face in zip(extents, faces)]


def bar_extents(ax) -> tuple[np.ndarray, list[tuple]]:
    """`bar_boxes` as (n, 4) rows of display (x0, y0, x1, y1) and their faces: a timeline
    holds hundreds of bars, and one `Bbox` each was most of a knob move's label placement."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle

    extents, faces = [np.empty((0, 4))], []
    drawn = sorted(ax.get_children(), key=lambda a: a.get_zorder())   # stable: drawing order
    for artist in drawn:
        if isinstance(artist, Rectangle) and artist is not ax.patch:
            face = artist.get_facecolor()
            if artist.get_visible() and artist.get_fill() and face[3] > 0:
                extents.append([_sorted(artist.get_window_extent())])
                faces.append(tuple(face))
        elif isinstance(artist, PolyCollection) and artist.get_visible():
            rows, bar_faces = _collection_bars(artist)
            extents.append(rows)
            faces += bar_faces
    return np.vstack(extents), faces


def _collection_bars(collection) -> tuple[np.ndarray, list[tuple]]:
    """The display extents and faces of a polygon collection's filled rectangles (a bar, not a
    band from `fill_between`), in drawing order, tested and transformed all at once."""
    paths, colours = collection.get_paths(), collection.get_facecolors()
    if not paths or not len(colours):
        return np.empty((0, 4)), []
    rgba = colours[np.arange(len(paths)) % len(colours)]
    sizes = np.array([len(path.vertices) for path in paths])
    bars, corners = [np.empty(0, int)], [np.empty((0, 2, 2))]
    for size in (4, 5):   # a rectangle's outline, closed or not
        index = np.flatnonzero((sizes == size) & (rgba[:, 3] > 0))
        if len(index):
            vertices = np.stack([paths[i].vertices for i in index])
            keep = _are_rectangles(vertices)
            bars.append(index[keep])
            corners.append(np.stack([vertices[keep].min(axis=1), vertices[keep].max(axis=1)], axis=1))
    order = np.argsort(np.concatenate(bars), kind="stable")
    bars, corners = np.concatenate(bars)[order], np.concatenate(corners)[order]
    # axis scales are separable, so a rectangle's two corners bound its transformed extent
    points = collection.get_transform().transform(corners.reshape(-1, 2)).reshape(-1, 2, 2)
    return np.hstack([points.min(axis=1), points.max(axis=1)]), [tuple(rgba[i]) for i in bars]


def _are_rectangles(vertices: np.ndarray) -> np.ndarray:
    """For (n, k, 2) outlines: which are axis-aligned rectangles, with two distinct x and two
    distinct y values."""
    ordered = np.sort(vertices.round(9), axis=1)
    return np.all((ordered[:, 1:] != ordered[:, :-1]).sum(axis=1) == 1, axis=1)


def _luminance(rgba) -> float:
    """WCAG relative luminance of an sRGB colour."""
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a, b) -> float:
    """WCAG contrast ratio of two colours (1: the same, 21: black on white)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def readable_on(face, dark: str = "#222222", light: str = "white") -> str:
    """The text colour, dark or light, that contrasts more with a bar of colour `face`."""
    from matplotlib.colors import to_rgba

    return max((dark, light), key=lambda c: contrast(to_rgba(c), to_rgba(face)))


@_measures
def texts_over_bars(fig: Figure, pad_px: float = 0.5) -> list[tuple[str, str]]:
    """(label, why) for each label placed in an axes that sits on bars it cannot be read on:
    one partly on bars and partly off them (it crosses a bar's outer edge), or one on a bar
    with too little contrast against it (MIN_CONTRAST; where bars are stacked, the one drawn
    on top). A label on bars in a contrasting colour is an in-bar label and reads, and so does
    one on an opaque box of its own. Tick labels, titles and legends live outside the bars."""
    from matplotlib.colors import to_rgba

    renderer = drawn_renderer(fig)
    out = []
    for ax in fig.axes:
        bars = bar_boxes(ax)   # in drawing order: a later bar lies on an earlier one
        for text in [t for t in ax.texts if t.get_visible() and t.get_text().strip() and t.get_alpha() != 0
                     and not _on_own_background(t)]:
            box = text.get_window_extent(renderer)
            under = [(bar, face) for bar, face in bars
                     if min(box.x1, bar.x1) - max(box.x0, bar.x0) > pad_px
                     and min(box.y1, bar.y1) - max(box.y0, bar.y0) > pad_px]
            if not under:
                continue
            points = [(x, y) for x in (box.x0 + pad_px, (box.x0 + box.x1) / 2, box.x1 - pad_px)
                      for y in (box.y0 + pad_px, (box.y0 + box.y1) / 2, box.y1 - pad_px)]
            tops = [next((face for bar, face in reversed(under) if bar.contains(x, y)), None) for x, y in points]
            if None in tops:
                out.append((text.get_text(), "crosses a bar's edge"))
                continue
            ratio = min(contrast(to_rgba(text.get_color()), face) for face in tops)
            if ratio < MIN_CONTRAST:
                out.append((text.get_text(), f"contrast {ratio:.1f} on its bar (< {MIN_CONTRAST:g})"))
    return out


def _on_own_background(text: Text) -> bool:
    """A label drawn on an opaque box of its own reads on anything beneath it."""
    box = text.get_bbox_patch()
    return box is not None and box.get_visible() and box.get_facecolor()[3] >= 0.8


def small_texts(fig: Figure, min_pt: float = MIN_FONT_PT) -> list[tuple[str, float]]:
    """(label, size in pt as shown) of every drawn label smaller than `min_pt` where the
    notebook shows it: a figure wider than COLUMN_IN is scaled down to the column, and its
    type with it: 7 pt type on a figure wider than the column reads smaller."""
    return [(text, round(pt, 1)) for text, pt in shown_sizes(fig) if pt < min_pt - 1e-9]


@_measures
def shown_sizes(fig: Figure) -> list[tuple[str, float]]:
    """(label, size in pt as the notebook shows it) of every drawn label: the figure is scaled
    down to COLUMN_IN if wider, its type with it. Call after a draw."""
    shown = min(1.0, COLUMN_IN / fig.get_figwidth())
    return [(t.get_text(), t.get_fontsize() * shown) for t in visible_texts(fig)]


@_measures
def title_missing_models(fig: Figure, models: tuple[str, ...] | None = None) -> list[tuple[str, list[str]]]:
    """(title, models it leaves out) for each axes whose tick labels or legend name two or more
    built-in models while its title names fewer of them: a title that says "mlp" over bars of
    mlp, gpt and cnn misleads."""
    import re

    from dpviz.core.config import MODEL_DEFAULTS

    models = tuple(MODEL_DEFAULTS) if models is None else models
    named = lambda text: {m for m in models if re.search(rf"\b{re.escape(m)}\b", text)}
    drawn_renderer(fig)
    out = []
    for ax in fig.axes:
        legend = ax.get_legend()
        shown = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()] + \
            ([t.get_text() for t in legend.get_texts()] if legend is not None else [])
        drawn = set().union(*map(named, shown)) if shown else set()
        title = " ".join(t for t in (ax.get_title(loc="left"), ax.get_title(), ax.get_title(loc="right")) if t)
        if len(drawn) >= 2 and title and named(title) and not drawn <= named(title):
            out.append((title, sorted(drawn - named(title))))
    return out


# --- what covers data, ticks that mislead, bars that hide bars --------------------------------

def _drawn_legends(fig: Figure):
    """(axes, its visible legend, the renderer) for each axes with one, after a draw."""
    renderer = drawn_renderer(fig)
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            yield ax, legend, renderer


@_measures
def legends_over_bars(fig: Figure, pad_px: float = 0.5) -> list[tuple[str, int]]:
    """(legend's first entry, how many bars) for each legend drawn over filled bars of its axes:
    a legend placed inside the axes (06's GPT legend on the head's backward bar) hides the data
    it explains. Legends outside the axes cover no bars. Call after a draw."""
    out = []
    for ax, legend, renderer in _drawn_legends(fig):
        x0, y0, x1, y1 = _sorted(legend.get_window_extent(renderer))
        bars = bar_extents(ax)[0]
        covered = int(np.sum((bars[:, 2] > x0 + pad_px) & (bars[:, 0] < x1 - pad_px)
                             & (bars[:, 3] > y0 + pad_px) & (bars[:, 1] < y1 - pad_px)))
        if covered:
            texts = legend.get_texts()
            out.append((texts[0].get_text() if texts else "", covered))
    return out


@_measures
def legends_across_axes(fig: Figure, pad_px: float = 1.0) -> list[str]:
    """The first entry of each legend that straddles its axes' edge: partly inside, partly out,
    so a sample line crosses the spine (05's legend). Inside or wholly outside reads."""
    out = []
    for ax, legend, renderer in _drawn_legends(fig):
        lx0, ly0, lx1, ly1 = _sorted(legend.get_window_extent(renderer))
        ax0, ay0, ax1, ay1 = _sorted(ax.get_window_extent(renderer))
        inside = lx0 >= ax0 - pad_px and lx1 <= ax1 + pad_px and ly0 >= ay0 - pad_px and ly1 <= ay1 + pad_px
        apart = lx0 >= ax1 - pad_px or lx1 <= ax0 + pad_px or ly0 >= ay1 - pad_px or ly1 <= ay0 + pad_px
        if not inside and not apart:
            texts = legend.get_texts()
            out.append(texts[0].get_text() if texts else "")
    return out


@_measures
def fractional_ticks(fig: Figure) -> list[tuple[str, list[str]]]:
    """(axis, its fractional tick labels) where every point the axes' lines and markers put on
    that axis is a whole number (K, k, a rank, a count) and a tick label is not: "k = 2.5" is
    no value the learner can pick (05's k axis read 2.5, 7.5). Log axes and axes without lines
    are left alone. Call after a draw."""
    drawn_renderer(fig)
    out = []
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            values = _line_values(ax, name)
            if axis.get_scale() != "linear" or len(np.unique(values)) < 2 or not np.all(values == np.round(values)):
                continue
            drawn = [tick for tick in mpl_gate.drawn_ticks(axis) if mpl_gate.is_major(tick, axis)]
            bad = [tick.label1.get_text() for tick in drawn   # a word at a group's middle is no number
                   if tick.label1.get_visible() and _is_number(tick.label1.get_text())
                   and not float(tick.get_loc()).is_integer()]
            if bad:
                out.append((f"{ax.get_title(loc='left') or ax.get_title() or 'axes'}: {name}", bad))
    return out


def _is_number(label: str) -> bool:
    """Whether a tick label reads as a number (matplotlib writes minus as U+2212)."""
    try:
        float(label.replace("\u2212", "-"))
    except ValueError:
        return False
    return True


def _line_values(ax, name: str) -> np.ndarray:
    """The finite data values of the axes' lines and scatter points on axis `name` ("x"/"y")."""
    from matplotlib.collections import PathCollection

    parts = [np.asarray(getattr(line, f"get_{name}data")(), dtype=float).ravel() for line in ax.lines
             if line.get_visible() and line.get_transform() == ax.transData]
    parts += [np.asarray(c.get_offsets(), dtype=float)[:, "xy".index(name)] for c in ax.collections
              if isinstance(c, PathCollection) and c.get_visible() and len(c.get_offsets())]
    values = np.concatenate(parts) if parts else np.empty(0)
    return values[np.isfinite(values)]


@_measures
def overdrawn_bars(fig: Figure, pad_px: float = 1.0) -> list[tuple[str, int]]:
    """(axes' title, how many pairs) where an opaque bar of a lane (the same top and bottom, to a
    pixel) is drawn over part of an earlier one's end, or over all of it: the earlier bar's
    extent can no longer be read (03's all-reduces of one lane, bucket 2 drawn over bucket 3).
    A bar drawn inside an earlier one is layering (work over a lane's background) and reads;
    bars stacked on purpose sit in lanes of their own height. Call after a draw."""
    drawn_renderer(fig)
    out = []
    for ax in fig.axes:
        extents, faces = bar_extents(ax)   # in drawing order
        opaque = np.array([face[3] >= 0.99 for face in faces], dtype=bool).reshape(-1)
        rows = extents[opaque]
        lanes = np.round(rows[:, [1, 3]])
        pairs = 0
        for lane in np.unique(lanes, axis=0):
            x0, x1 = rows[np.all(lanes == lane, axis=1)][:, [0, 2]].T
            # [i, j]: bar j, drawn after bar i, overlaps it and does not sit inside it
            later = np.triu(np.ones((len(x0), len(x0)), dtype=bool), k=1)
            overlap = np.minimum(x1[:, None], x1[None, :]) - np.maximum(x0[:, None], x0[None, :]) > pad_px
            inside = (x0[None, :] >= x0[:, None] - pad_px) & (x1[None, :] <= x1[:, None] + pad_px)
            pairs += int(np.sum(later & overlap & ~inside))
        if pairs:
            out.append((ax.get_title(loc="left") or ax.get_title(), pairs))
    return out


# --- labels on markers -------------------------------------------------------------------------

def marker_extents(ax) -> np.ndarray:
    """(n, 4) rows of display (x0, y0, x1, y1): the square each visible line marker fills (its
    size and edge, in points, at the figure's dpi), for every point of every line with markers."""
    rows = [np.empty((0, 4))]
    for line in ax.lines:
        if not line.get_visible() or line.get_marker() in (None, "", "None", " ", "none"):
            continue
        half = (line.get_markersize() + line.get_markeredgewidth()) / 2 * ax.figure.dpi / 72
        xy = line.get_transform().transform(np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float))
        rows.append(np.hstack([xy - half, xy + half]))
    return np.vstack(rows)


@_measures
def texts_over_markers(fig: Figure, pad_px: float = 0.5) -> list[str]:
    """Labels placed in an axes (not titles, ticks or legends) whose box overlaps a line's
    marker by more than `pad_px` each way: a value written on its own point hides both."""
    renderer = drawn_renderer(fig)
    out = []
    for ax in fig.axes:
        markers = marker_extents(ax)
        for text in [t for t in ax.texts if t.get_visible() and t.get_text().strip()]:
            b = text.get_window_extent(renderer)
            dx = np.minimum(markers[:, 2], b.x1) - np.maximum(markers[:, 0], b.x0)
            dy = np.minimum(markers[:, 3], b.y1) - np.maximum(markers[:, 1], b.y0)
            if np.any((dx > pad_px) & (dy > pad_px)):
                out.append(text.get_text())
    return out


# --- labels that drift from their bars, names of what is not drawn -----------------------------

FLOAT_HEIGHTS = 3.0   # a label more than this many of its font heights from its bar reads as no bar's


@_measures
def floating_labels(fig: Figure, heights: float = FLOAT_HEIGHTS) -> list[tuple[str, float]]:
    """(label, its gap in font heights) for each label put on a bar (its anchor, the data point
    it was placed at, lies on a filled bar or its edge: a name or value at a bar's top) that is
    drawn more than `heights` font heights from every bar its anchor lies on: moved away by an
    offset or by `place_labels` until it sits beside some other bar, or beside none (03's
    parameter names stacked far above their gradients). Call after a draw."""
    from matplotlib.text import Annotation

    renderer = drawn_renderer(fig)
    out = []
    for ax in fig.axes:
        bars = bar_extents(ax)[0]
        for text in [t for t in ax.texts if t.get_visible() and t.get_text().strip() and t.get_alpha() != 0]:
            anchor = _data_anchor(ax, text, Annotation)
            if anchor is None:
                continue
            (x, y), pad = anchor, 1.0
            mine = bars[(bars[:, 0] - pad <= x) & (x <= bars[:, 2] + pad) & (bars[:, 1] - pad <= y) & (y <= bars[:, 3] + pad)]
            if not len(mine):
                continue
            b = _sorted(text.get_window_extent(renderer))
            dx = np.maximum(0, np.maximum(mine[:, 0] - b[2], b[0] - mine[:, 2]))
            dy = np.maximum(0, np.maximum(mine[:, 1] - b[3], b[1] - mine[:, 3]))
            gap = float(np.min(np.hypot(dx, dy))) / (text.get_fontsize() * fig.dpi / 72)
            if gap > heights:
                out.append((text.get_text(), round(gap, 1)))
    return out


def _data_anchor(ax, text: Text, annotation: type) -> tuple[float, float] | None:
    """The display point a text was put at in data coordinates (before any offset in points),
    or None for a text placed in axes or figure coordinates (a note, a stamp). A text's
    transform is the data's if it moves two points as the data's moves them, up to one shift
    (`offset_copy`, `place_labels`): matplotlib names no public test for a transform's start."""
    if isinstance(text, annotation):
        return tuple(ax.transData.transform(text.xy)) if text.xycoords == "data" else None
    position = np.asarray(text.get_unitless_position(), dtype=float)
    probes = np.array([position, 2 * position + 1])   # stays positive on a log axis
    with np.errstate(all="ignore"):
        shift = text.get_transform().transform(probes) - ax.transData.transform(probes)
    if not np.all(np.isfinite(shift)) or not np.allclose(shift[0], shift[1], atol=0.5):
        return None
    return tuple(ax.transData.transform(position))


# What a figure draws and a stamp's note may name (span kinds as the figures say them): a note
# naming one the figure shows nowhere else tells of something the reader cannot find.
DRAWN_THINGS = ("micro-step", "all-reduce", "bucket", "forward", "backward", "optimizer", "recompute", "link")


@_measures
def names_not_drawn(fig: Figure) -> list[tuple[str, str]]:
    """(tag or legend entry, what it names that the figure does not draw) for:
    a source stamp's note (`style.tag`) naming one of DRAWN_THINGS that no other text of the
    figure names (15's "all-reduce ends capped at their micro-step" on a timeline without
    micro-steps); and a legend entry whose filled patch or line is of a colour nothing in its
    axes is drawn in (an entry for a kind of bar the figure has none of). Call after a draw."""
    import re

    from dpviz.plots.style import SOURCE_GID

    drawn_renderer(fig)
    said = lambda text: text.lower().replace("_", "-")
    texts = visible_texts(fig)
    out = []
    for tag in [t for t in texts if t.get_gid() == SOURCE_GID and " · " in t.get_text()]:
        elsewhere = " ".join(said(t.get_text()) for t in texts if t is not tag)
        note = said(tag.get_text().split(" · ", 1)[1])
        out += [(tag.get_text(), thing) for thing in DRAWN_THINGS
                if re.search(rf"\b{thing}", note) and not re.search(rf"\b{thing}", elsewhere)]
    legends = [(legend, [ax]) for ax in fig.axes if (legend := ax.get_legend()) is not None]
    legends += [(legend, fig.axes) for legend in fig.legends]
    for legend, axes in legends:
        if not legend.get_visible():
            continue
        drawn = set().union(*(_drawn_colours(ax) for ax in axes))
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            colour = _handle_colour(handle)
            if colour is not None and colour not in drawn:
                out.append((text.get_text(), "no mark of its colour"))
    return out


def _rgb(colour) -> tuple[float, float, float]:
    return tuple(round(float(c), 3) for c in colour[:3])


def _handle_colour(handle) -> tuple | None:
    """The colour a legend entry shows: a filled patch's face, a line's colour; None for what
    names no colour of its own (an outline, a hatch on white, a patch filled white)."""
    from matplotlib.colors import to_rgba
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if isinstance(handle, Patch) and handle.get_fill() and handle.get_facecolor()[3] > 0:
        rgb = _rgb(handle.get_facecolor())
        return None if rgb == (1.0, 1.0, 1.0) else rgb
    if isinstance(handle, Line2D) and handle.get_linestyle() not in ("None", "", " ", "none"):
        return _rgb(to_rgba(handle.get_color()))
    return None


def _drawn_colours(ax) -> set[tuple]:
    """Every face, edge and line colour the axes' patches, collections and lines draw in."""
    from matplotlib.collections import Collection
    from matplotlib.colors import to_rgba
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    colours = set()
    for artist in ax.get_children():
        if not artist.get_visible() or artist is ax.patch:
            continue
        if isinstance(artist, Patch):
            colours |= {_rgb(artist.get_facecolor()), _rgb(artist.get_edgecolor())}
        elif isinstance(artist, Collection) and len(artist.get_paths()):   # an empty one draws nothing
            colours |= {_rgb(c) for c in (*artist.get_facecolors(), *artist.get_edgecolors())}
        elif isinstance(artist, Line2D):
            colours |= {_rgb(to_rgba(artist.get_color())), _rgb(to_rgba(artist.get_markerfacecolor()))}
    return colours

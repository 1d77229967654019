"""Every private matplotlib call dpviz makes, each beside its fallback.

A slider redraws its figure on every knob move, and what makes a move quick (bars added with
their own data limits, a legend put back, layouts and glyphs kept, a frame kept as pixels)
stands on matplotlib's internals. pyproject admits matplotlib 3.8 to 3.11, so nothing outside
this module reaches into them. Each function below uses a private name where this matplotlib
has it (a feature check, never a version compare) and otherwise falls back to public calls
that draw the same pixels, only slower or less cached; where matplotlib has no public
equivalent, the fallback skips the cache. `INTERNALS` names them all, and `disable` turns
some off, in-process, so a test can run each fallback (tests/test_mpl_gate.py).
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import get_hinting_flag
from matplotlib.font_manager import fontManager
from matplotlib.ft2font import FT2Font
from matplotlib.text import Text
from matplotlib.ticker import NullLocator
from matplotlib.transforms import Bbox

try:
    from matplotlib.ft2font import RenderMode   # 3.11 on, with the glyph calls below
except ImportError:
    RenderMode = None

# the private names this module uses, by the name `disable` takes, and what uses them
INTERNALS = ("_set_in_autoscale", "_unstale_viewLim", "_request_autoscale_view",   # bars
             "_remove_method", "_remove_legend", "_loc",                           # legends, the frame
             "_update_ticks", "_major", "_left_title", "_right_title",             # legibility, frame, style
             "_get_layout", "_multialignment", "_linespacing",                     # legibility's kept layouts
             "_prepare_font", "_layout", "_set_transform", "_render_glyph", "_renderer",   # glyphs' caches
             "_get_font_height_metrics", "_find_fonts_by_props")                   # glyphs' kept font heights
_disabled: set[str] = set()


def disable(names: Iterable[str]) -> None:
    """Behave as a matplotlib without these private names would (`[]`: use them again)."""
    names = set(names)
    unknown = names - set(INTERNALS)
    if unknown:
        raise ValueError(f"not a gated matplotlib internal: {sorted(unknown)}")
    _disabled.clear()
    _disabled.update(names)


def _private(obj, name: str):
    return None if name in _disabled else getattr(obj, name, None)


# --- a collection added with the caller's data limits (dpviz.plots.bars) ---------------------

def adds_in_steps() -> bool:
    """Can `add_collection(c, autolim=True)` be taken step by step, the caller computing the
    data limits? matplotlib 3.11's add_collection marks the collection for relim
    (`count_in_relim`), brings stale view limits up to date (`unstale_view`), grows the data
    limits from the collection's paths and asks for an autoscale (`request_autoscale`). The
    first step's private call came with 3.11; the others are in 3.8-3.11. Where any is
    missing, the caller adds with `add_collection` itself: matplotlib measures the paths,
    slower, the same limits."""
    return (_private(Artist, "_set_in_autoscale") is not None and _private(Axes, "_unstale_viewLim") is not None
            and _private(Axes, "_request_autoscale_view") is not None)


def count_in_relim(collection) -> None:
    """Have `Axes.relim` count the collection, as add_collection's does: `_set_in_autoscale`
    (3.11; before, relim counts no collection). Only where `adds_in_steps()`."""
    collection._set_in_autoscale(True)


def unstale_view(ax) -> None:
    """Bring the axes' pending autoscale up to date before the data limits grow, as
    add_collection does: `Axes._unstale_viewLim` (3.8-3.11). Only where `adds_in_steps()`."""
    ax._unstale_viewLim()


def request_autoscale(ax) -> None:
    """Autoscale the view at the next draw: `Axes._request_autoscale_view` (3.8-3.11), what
    add_collection (3.11) and broken_barh (before) ask. Fallback: the public `autoscale_view`
    now: the same limits for what is on the axes, one autoscale per call instead of one per
    draw."""
    request = _private(ax, "_request_autoscale_view")
    if request is not None:
        request()
    else:
        ax.autoscale_view()


# --- legends (dpviz.plots.legends, dpviz.widgets.frame) ----------------------------------------

def make_removable_legend(legend, ax) -> bool:
    """Have `legend.remove()` take it off `ax` as it takes off one `Axes.legend` made: that sets
    the legend's `_remove_method` to `Axes._remove_legend` (both 3.8-3.11), which
    `Artist.remove` calls. False, changing nothing, where either is missing: the caller makes a
    new legend instead (`ax.legend`: the same pixels, a legend built on every move)."""
    remove = _private(ax, "_remove_legend")
    if remove is None or "_remove_method" in _disabled or not hasattr(legend, "_remove_method"):
        return False
    legend._remove_method = remove
    return True


def legend_loc(legend) -> int | None:
    """The legend's location code: 0 for "best" (placed where the data leaves room, so it
    moves with the data), 1-10 for a fixed corner or side. `Legend._loc` (3.8-3.11) is the only
    way to read it back. None where it is missing: the caller treats the legend as one that
    may move (drawn with the data on every move: the same pixels, a smaller kept frame)."""
    return _private(legend, "_loc")


# --- ticks and titles (dpviz.plots.legibility, dpviz.widgets.frame, dpviz.plots.style) ---------

def drawn_ticks(axis) -> list:
    """The ticks `Axis.draw` paints, placed and labelled for the current view:
    `Axis._update_ticks()` (3.8-3.11). Fallback: its steps on public calls (`_placed_ticks`),
    a tick kept where its place lies in the view give or take 1e-10 of the view's width, the
    test matplotlib makes: the same Tick objects with the same places and labels (on 2-D axes:
    dpviz draws no 3-D one, whose view 3.9 on narrows by a margin)."""
    update = _private(axis, "_update_ticks")
    if update is not None:
        return update()
    ticks = [*_placed_ticks(axis, "major"), *_placed_ticks(axis, "minor")]
    if not ticks:
        return []
    transform = axis.get_transform()
    low, high = transform.transform(sorted(axis.get_view_interval()))
    low, high = min(low, high), max(low, high)
    slack = (high - low) * 1e-10
    drawn = []
    for tick in ticks:
        try:
            at = transform.transform(tick.get_loc())
        except AssertionError:   # a masked place, as matplotlib skips it
            continue
        if low - slack <= at <= high + slack:
            drawn.append(tick)
    return drawn


def _placed_ticks(axis, which: str) -> list:
    """`drawn_ticks`' fallback for the major or minor ticks: placed at the locator's places and
    labelled by the formatter, none where the locator is a NullLocator or every part of the
    group is off (3.11 skips them there; before, it placed them, all parts off)."""
    locator = getattr(axis, f"get_{which}_locator")()
    if isinstance(locator, NullLocator) or not _group_shown(axis.get_tick_params(which=which)):
        return []
    places = getattr(axis, f"get_{which}ticklocs")()
    labels = getattr(axis, f"get_{which}_formatter")().format_ticks(places)
    ticks = getattr(axis, f"get_{which}_ticks")(len(places))
    for tick, place, label in zip(ticks, places, labels):
        tick.update_position(place)
        tick.label1.set_text(label)
        tick.label2.set_text(label)
    return ticks


# A tick group's parts, by the names `get_tick_params` gives them (a y-axis' first tick line
# is "left", and it also echoes it as "bottom"); a part it leaves out is on.
_TICK_PARTS = (("bottom", "left"), ("top", "right"), ("labelbottom", "labelleft"), ("labeltop", "labelright"),
               ("gridOn",))


def _group_shown(params: dict) -> bool:
    """Whether 3.11 places a tick group: unless every part of it is off."""
    return any(next((params[name] for name in names if name in params), None) is not False
               for names in _TICK_PARTS)


def is_major(tick, axis) -> bool:
    """Whether `axis` holds the tick as a major one: `Tick._major` (3.8-3.11). Fallback:
    whether it is one of `axis.majorTicks` (the same answer, by a scan of the major ticks)."""
    major = _private(tick, "_major")
    if major is not None:
        return major
    return any(tick is t for t in axis.majorTicks)


def side_titles(ax) -> tuple[Text, Text]:
    """The axes' left and right title Texts (`ax.title` is the centre one): `Axes._left_title`
    and `_right_title` (3.8-3.11). Fallback: the axes' children placed as titles are (axes
    coordinates shifted by `titleOffsetTrans`), at x 0 and x 1: the same artists."""
    left, right = _private(ax, "_left_title"), _private(ax, "_right_title")
    if left is not None and right is not None:
        return left, right
    placed = ax.transAxes + ax.titleOffsetTrans
    titles = {t.get_position()[0]: t for t in ax.get_children()
              if isinstance(t, Text) and t.get_transform() == placed}
    return titles[0.0], titles[1.0]


# --- a text's layout, kept (dpviz.plots.legibility.text_extent) --------------------------------

def layout_state(text) -> tuple | None:
    """What a text's layout depends on that no public getter gives on every matplotlib
    pyproject admits: its lines' alignment (`Text._multialignment`, 3.8-3.11, no public
    getter) and its line spacing (the public `get_linespacing` from 3.11; before it, the
    private `_linespacing` that getter returns). None where either cannot be read, or where
    this matplotlib cannot lay a text out apart from measuring it (no `_get_layout`, which
    `layout_box` calls): the caller then measures it with `get_window_extent` every time (the
    same box, laid out again)."""
    if "_multialignment" in _disabled or not hasattr(text, "_multialignment") \
            or _private(text, "_get_layout") is None:
        return None
    getter = getattr(text, "get_linespacing", None)
    spacing = getter() if getter is not None else _private(text, "_linespacing")
    return None if spacing is None else (text._multialignment, spacing)


def layout_box(text, renderer) -> Bbox:
    """The text's box laid out at the origin: `Text._get_layout(renderer)[0]` (3.8-3.11), what
    `get_window_extent` lays out and then moves to the text's place. Only where
    `layout_state(text)` is not None."""
    return text._get_layout(renderer)[0]


# --- glyphs drawn from kept layouts and bitmaps (dpviz.widgets.glyphs) -------------------------

def keeps_glyphs(renderer) -> bool:
    """Can a renderer draw text from kept layouts and glyph bitmaps? Where this matplotlib has
    every call `agg_font`, `glyph_layout`, `render_glyph` and `glyph_painter` use: Agg's
    `_prepare_font` and `_renderer` (3.8-3.11), FT2Font's `_layout`, `_set_transform`,
    `_render_glyph` and the public `RenderMode` (all four 3.11 on). Where not, the canvas keeps
    a plain RendererAgg: matplotlib lays out and renders every glyph itself, the same pixels,
    slower."""
    return (RenderMode is not None and _private(renderer, "_prepare_font") is not None
            and _private(renderer, "_renderer") is not None
            and all(_private(FT2Font, name) is not None for name in ("_layout", "_set_transform", "_render_glyph")))


def agg_font(renderer, prop) -> FT2Font:
    """The FT2Font Agg draws `prop` with, cleared and sized for the renderer's dpi:
    `RendererAgg._prepare_font` (3.8-3.11). Only where `keeps_glyphs(renderer)`."""
    return renderer._prepare_font(prop)


def glyph_layout(font: FT2Font, s: str, features, language) -> list:
    """`s` laid out in `font` as Agg's `draw_text` lays it out: one item per glyph (its font,
    which may be a fallback font, index and place), `FT2Font._layout` (3.11). Only where
    `keeps_glyphs`."""
    return font._layout(s, flags=get_hinting_flag(), features=features, language=language)


def render_glyph(font: FT2Font, index: int, matrix: np.ndarray, subpixel: tuple[int, int],
                 antialiased: bool) -> tuple[np.ndarray, int, int]:
    """(bitmap, left, top) of one glyph of `font` at its set size, turned by `matrix` (16.16
    fixed point) and shifted by `subpixel` (1/64 pixel), rendered as Agg's text drawing renders
    it: `FT2Font._set_transform` and `_render_glyph` (3.11). The bitmap is a copy (the font
    reuses its buffer), 0 or 255 when not antialiased. Only where `keeps_glyphs`."""
    font._set_transform(matrix, list(subpixel))
    bitmap = font._render_glyph(index, get_hinting_flag(), RenderMode.NORMAL if antialiased else RenderMode.MONO)
    buffer = np.array(bitmap.buffer)
    if not antialiased:
        buffer *= 0xff
    return buffer, bitmap.left, bitmap.top


def glyph_painter(renderer) -> Callable:
    """`paint(bitmap, x, y, angle, gc)`: Agg's own call that paints a glyph's bitmap in the
    graphics context's colour, its bottom-left corner at (x, y) pixels down from the top, the
    one `RendererAgg` makes on its private `_renderer` (3.8-3.11). Taken once per string, not
    per glyph. Only where `keeps_glyphs(renderer)`."""
    return renderer._renderer.draw_text_image


def answers_font_heights(cls: type) -> type:
    """Class decorator: have matplotlib's text layout ask renderers of `cls` for a font's
    heights (ascent, descent, line gap in pixels) through their `font_height_metrics(prop)`.
    matplotlib 3.11's `Text._get_layout` asks a renderer that has `_get_font_height_metrics`
    (its PDF and PS backends do) and otherwise finds the font and reads its OS/2 or hhea table
    on every layout; 3.8-3.10 measure "lp" instead and never ask, so there the answer goes
    unused. Disabled, the renderers lack it (`hasattr` is False): 3.11 reads the tables itself,
    the same numbers, slower."""
    def hook(renderer):
        if "_get_font_height_metrics" in _disabled:
            raise AttributeError("_get_font_height_metrics")
        return renderer.font_height_metrics

    cls._get_font_height_metrics = property(hook)
    return cls


def font_files(prop) -> list | None:
    """The font files matplotlib lays `prop` out in (its first, then the fallbacks), found as
    `Text._get_layout` finds them: `FontManager._find_fonts_by_props` (3.8-3.11). None where
    it is missing: a renderer asked for font heights then answers that it does not know, and
    matplotlib finds the font and reads its tables itself (the same numbers)."""
    find = _private(fontManager, "_find_fonts_by_props")
    return None if find is None else find(prop)

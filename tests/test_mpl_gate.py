"""Every private matplotlib call dpviz makes is in `dpviz.plots.mpl_gate`, and each fallback
really runs: with a private name turned off (`mpl_gate.disable`), what the gate's caller draws
or measures is what it draws or measures with it. Every comparison is exact, by construction:
the same pixels (arrays equal) where both ways paint with matplotlib's own calls on the same
state; the same data (limits, boxes, ticks, the very same artists) where the fallback reaches
the same values by public calls that do the private call's arithmetic."""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties, fontManager
from matplotlib.ft2font import FT2Font
from matplotlib.legend import Legend
from matplotlib.patches import Patch
from matplotlib.text import Text

from dpviz.plots import mpl_gate
from dpviz.plots.bars import hbars
from dpviz.plots.legends import kept_legend
from dpviz.plots.legibility import text_extent, visible_texts
from dpviz.plots.style import titles
from dpviz.widgets.frame import frame_artists, frame_key
from dpviz.widgets.glyphs import CachingCanvasAgg, CachingRendererAgg

ROOT = Path(__file__).resolve().parents[1]
GATE = "dpviz/plots/mpl_gate.py"
PRIVATE = re.compile("|".join([*(rf"\b{name}\b" for name in mpl_gate.INTERNALS),
                               r"\bmatplotlib\._", r"from matplotlib[\w.]* import [^\n]*\b_[A-Za-z]"]))
VERSION = tuple(int(part) for part in matplotlib.__version__.split(".")[:2])


@pytest.fixture(autouse=True)
def nothing_disabled_after():
    yield
    mpl_gate.disable([])


def _both(names, make):
    """(`make()` with matplotlib's private names, `make()` with `names` turned off)."""
    used = make()
    mpl_gate.disable(names)
    try:
        return used, make()
    finally:
        mpl_gate.disable([])


def _figure(canvas=FigureCanvasAgg, **kwargs):
    fig = Figure(figsize=(5, 2.5), dpi=100, **kwargs)
    canvas(fig)
    return fig, fig.add_subplot()


def _pixels(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


# --- the gate holds them all --------------------------------------------------------------------

def test_private_matplotlib_calls_live_in_the_gate_only():
    found = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "dpviz").rglob("*.py"))
             if PRIVATE.search(p.read_text())]
    assert found == [GATE]


def _matplotlib_private_names() -> set[str]:
    """Every private name matplotlib's source (and its compiled modules' stubs) spells."""
    source = Path(matplotlib.__file__).parent
    return {name for p in source.rglob("*.py*") if p.suffix in (".py", ".pyi") and "tests" not in p.parts
            for name in re.findall(r"\b_[A-Za-z]\w*", p.read_text(errors="ignore"))}


def _own_names(trees: dict) -> set[str]:
    """The names dpviz defines for itself (functions, classes, variables, arguments, its own
    objects' attributes), the gate's left out: it sets matplotlib's names on matplotlib's objects."""
    own = set()
    for path, tree in trees.items():
        if path == GATE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                own.add(node.attr)
    return own


def _reaches(tree: ast.AST, private: set[str], own: set[str]) -> list[str]:
    """Where a module reaches a private matplotlib name: an attribute matplotlib spells and dpviz
    does not define, a method by such a name on a class built on a matplotlib class (matplotlib
    would call it), or a private import from matplotlib."""
    from_matplotlib = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                       and (node.module or "").startswith("matplotlib") for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in private - own - NAMEDTUPLE_API:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ClassDef) and {ast.unparse(b) for b in node.bases} & from_matplotlib:
            found += [f"{f.lineno}: {node.name}.{f.name}" for f in node.body
                      if isinstance(f, ast.FunctionDef) and f.name in private]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("matplotlib"):
            if "._" in node.module or any(a.name.startswith("_") for a in node.names):
                found.append(f"{node.lineno}: from {node.module} import …")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("matplotlib._")]
    return found


NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}   # public, underscored against clashes


def test_no_module_but_the_gate_reaches_a_private_matplotlib_name():
    """The grep above knows the gated names; this finds a new one anywhere in dpviz (the torch
    gate aside: its privates are torch's, tests/test_torch_gate.py keeps them there)."""
    trees = {str(p.relative_to(ROOT)): ast.parse(p.read_text()) for p in sorted((ROOT / "dpviz").rglob("*.py"))}
    private, own = _matplotlib_private_names(), _own_names(trees)
    found = {path: where for path, tree in trees.items() if path not in (GATE, "dpviz/engine/torch_gate.py")
             and (where := _reaches(tree, private, own))}
    assert found == {}


def test_an_unknown_internal_is_refused():
    with pytest.raises(ValueError, match="not a gated matplotlib internal"):
        mpl_gate.disable(["_no_such_thing"])


def _owners() -> dict:
    """Where each gated name lives, and the first matplotlib in pyproject's range that has it.
    The font heights' is a name 3.11's text layout asks a renderer for: found in its code."""
    fig, ax = _figure()
    legend, text = ax.legend(handles=[Patch(label="a")]), ax.text(0, 0, "a")
    return {"_set_in_autoscale": (Artist, (3, 11)), "_unstale_viewLim": (Axes, (3, 8)),
            "_request_autoscale_view": (Axes, (3, 8)), "_remove_method": (legend, (3, 8)),
            "_remove_legend": (Axes, (3, 8)), "_loc": (Legend, (3, 8)), "_update_ticks": (ax.xaxis, (3, 8)),
            "_major": (ax.xaxis.get_major_ticks()[0], (3, 8)), "_left_title": (ax, (3, 8)),
            "_right_title": (ax, (3, 8)), "_get_layout": (Text, (3, 8)), "_multialignment": (text, (3, 8)),
            "_linespacing": (text, (3, 8)), "_prepare_font": (RendererAgg, (3, 8)),
            "_renderer": (fig.canvas.get_renderer(), (3, 8)), "_layout": (FT2Font, (3, 11)),
            "_set_transform": (FT2Font, (3, 11)), "_render_glyph": (FT2Font, (3, 11)),
            "_get_font_height_metrics": (Text._get_layout.__code__, (3, 11)),
            "_find_fonts_by_props": (fontManager, (3, 8))}


def _has(owner, name: str) -> bool:
    return name in owner.co_names if inspect.iscode(owner) else hasattr(owner, name)


def test_every_gated_name_is_there_on_the_matplotlibs_that_have_it():
    """A name misspelt in the gate would leave every figure on its fallback: right, but slow.
    Here each is found where it lives, on every matplotlib from the first that has it, and on
    3.11 (the newest pyproject admits) the gate takes every private path."""
    owners = _owners()
    assert set(owners) == set(mpl_gate.INTERNALS)
    assert all(_has(owner, name) for name, (owner, since) in owners.items() if VERSION >= since)
    if VERSION >= (3, 11):
        fig, ax = _figure(CachingCanvasAgg)
        assert mpl_gate.adds_in_steps() and mpl_gate.keeps_glyphs(fig.canvas.get_renderer())
        assert mpl_gate.layout_state(ax.text(0, 0, "a")) is not None
        assert isinstance(fig.canvas.get_renderer(), CachingRendererAgg)


def test_every_gated_name_has_a_fallback_test():
    tested = {*AUTOSCALE, *LEGEND, "_loc", "_update_ticks", "_major", *TITLES, *LAYOUT, *GLYPHS}
    assert tested == set(mpl_gate.INTERNALS)


# --- bars added with their own data limits ------------------------------------------------------

AUTOSCALE = ("_set_in_autoscale", "_unstale_viewLim", "_request_autoscale_view")


@pytest.mark.parametrize("xscale", ["linear", "log"])
@pytest.mark.parametrize("name", AUTOSCALE)
def test_bars_added_without_the_call_draw_and_autoscale_alike(name, xscale):
    """Without one of 3.11's add_collection steps, `hbars` adds its bars with add_collection:
    matplotlib's own data limits, which hbars' equal to the bit (tests/test_bars.py), and the
    same pending or immediate autoscale of them: the same pixels, limits and relim."""
    rng = np.random.default_rng(5)
    ranges = [(0.13, 2.71), (np.nan, 1.0), (-2.0, 1.0)] + rng.uniform(0.01, 97, (20, 2)).tolist()
    lanes = rng.uniform(0.1, 13, (23, 2)).tolist()

    def drawn():
        fig, ax = _figure()
        ax.set_xscale(xscale)
        bars = hbars(ax, ranges, lanes, facecolors="#4C72B0")
        ax.margins(x=0.1)
        hbars(ax, ranges[:5], (20, 1), facecolors="#DD8452")   # while the first's autoscale is pending
        state = (ax.dataLim.get_points().tolist(), ax.dataLim.minpos.tolist(), ax.get_xlim(), ax.get_ylim())
        pixels = _pixels(fig)
        ax.relim()
        return pixels, state, ax.dataLim.get_points().tolist(), bars.get_facecolor().tolist()

    assert _both([name], mpl_gate.adds_in_steps)[1] is False
    used, fallback = _both([name], drawn)
    assert np.array_equal(used[0], fallback[0]) and used[1:] == fallback[1:]


# --- legends ------------------------------------------------------------------------------------

LEGEND = ("_remove_method", "_remove_legend")
KWARGS = dict(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


@pytest.mark.parametrize("name", LEGEND)
def test_a_legend_that_cannot_be_put_back_is_made_anew_and_draws_the_same_pixels(name):
    def drawn():
        fig, ax = _figure(layout="constrained")
        first = kept_legend(ax, [Patch(color="#4C72B0", label="forward")], **KWARGS)
        first.remove()
        again = kept_legend(ax, [Patch(color="#4C72B0", label="forward")], **KWARGS)
        pixels = _pixels(fig)
        again.remove()                   # removable, as Axes.legend makes it
        return again is first, pixels, ax.legend_ is None

    used, fallback = _both([name], drawn)
    assert used[0] and not fallback[0]
    assert np.array_equal(used[1], fallback[1]) and used[2] and fallback[2]


def _timeline(ax, value: int) -> None:
    """A slider's figure: bars that change with the value, a legend beside them."""
    hbars(ax, [(0.5 * value, 2 + value), (6, 1.5)], [(0.2, 0.6), (1.2, 0.6)], facecolors=["#4C72B0", "#DD8452"])
    ax.set_yticks([0.5, 1.5], ["rank 0", "rank 1"])
    ax.set_title(f"move {value}", loc="left")
    kept_legend(ax, [Patch(color="#4C72B0", label="forward"), Patch(color="#DD8452", label="backward")], **KWARGS)


def test_a_legend_whose_place_is_unknown_is_drawn_with_the_data_to_the_same_pixels():
    """Without `Legend._loc` a slider's frame is kept without its legend, which is drawn over
    it on every move: each move is still the pixels of a whole draw, those with the legend in
    the frame."""
    from dpviz.widgets.slider import FigurePanel

    def moves():
        panel, shown = FigurePanel(_timeline, (6, 2.5)), []
        for value in (1, 3, 2, 3, 1):
            panel.show(value)
            moved = panel.png()
            panel.figure.canvas.draw()
            assert panel.png() == moved          # a move's pixels are a whole draw's
            shown.append((moved, panel.axes.legend_ in frame_artists(panel.axes), panel.reused_frame))
        return shown

    used, fallback = _both(["_loc"], moves)
    assert [png for png, _, _ in used] == [png for png, _, _ in fallback]
    assert all(framed for _, framed, _ in used) and not any(framed for _, framed, _ in fallback)
    assert all(reused for _, _, reused in used[1:] + fallback[1:])   # moves drawn over the kept frame


# --- ticks and titles ---------------------------------------------------------------------------

def _ticked_axes():
    """Axes whose ticks take every branch: major ticks placed outside the view, minor ticks on
    a log axis and a linear one, and an axis whose major group has every part turned off:
    3.11 places none of its ticks, as the fallback (written for a matplotlib newer than 3.11)
    does; 3.8-3.10 place them, every part off, so there that axis is left out."""
    from matplotlib.ticker import AutoMinorLocator

    fig, ax = _figure()
    ax.set_xscale("log")
    ax.set_xlim(3, 4000)
    ax.set_yticks([0, 2.5, 5, 7.5, 10])
    ax.set_ylim(0.13, 7.7)   # after the ticks: set_yticks widens the view to hold them
    ax.yaxis.set_minor_locator(AutoMinorLocator())
    axes = [ax.xaxis, ax.yaxis]
    if VERSION >= (3, 11):
        inset = fig.add_axes((0.5, 0.5, 0.3, 0.3))
        inset.tick_params(axis="x", which="major", bottom=False, top=False, labelbottom=False, labeltop=False)
        axes += [inset.xaxis, inset.yaxis]
    fig.canvas.draw()
    return fig, axes


def _ticks(fig, axes: list) -> tuple:
    """Each axis' drawn ticks (the objects, places, majorness, labels), the figure's visible
    texts and its axes' frame keys, which are read from them."""
    return (tuple(tuple((id(t), t.get_loc(), mpl_gate.is_major(t, axis), t.label1.get_text(), t.label2.get_text())
                        for t in mpl_gate.drawn_ticks(axis)) for axis in axes),
            [id(t) for t in visible_texts(fig)], [frame_key(ax) for ax in fig.axes])


@pytest.mark.parametrize("name", ["_update_ticks", "_major"])
def test_ticks_found_without_the_call_are_the_ticks_a_draw_paints(name):
    """The same Tick objects, places, majorness and labels; so the same visible texts and frame."""
    fig, axes = _ticked_axes()
    used, fallback = _both([name], lambda: _ticks(fig, axes))
    assert used == fallback
    log_x, y, *inset = used[0]
    assert {major for _, _, major, _, _ in log_x} == {True, False}
    assert {major for _, _, major, _, _ in y} == {True, False}
    assert [loc for _, loc, major, _, _ in y if major] == [2.5, 5, 7.5]     # 0 and 10 lie outside the view
    if inset:
        assert inset[0] == () and len(axes[2].get_majorticklocs()) > 0


TITLES = ("_left_title", "_right_title")


@pytest.mark.parametrize("name", TITLES)
def test_titles_found_without_the_call_are_the_axes_titles(name):
    fig, ax = _figure()
    ax.text(0, 1, "not a title", transform=ax.transAxes)
    seen = []
    for step in (lambda: None, lambda: ax.set_title("left", loc="left"), ax.clear):
        step()
        used, fallback = _both([name], lambda: titles(ax))
        assert [t.get_text() for t in used] == [ax.get_title(loc) for loc in ("left", "center", "right")]
        assert list(map(id, used)) == list(map(id, fallback))
        seen.append(used[0])
    assert seen[1] is seen[0] and seen[2] is not seen[1]   # clear() makes new titles: found anew


# --- a text's kept layout -----------------------------------------------------------------------

LAYOUT = ("_get_layout", "_multialignment", "_linespacing")


@pytest.mark.parametrize("name", LAYOUT)
def test_a_text_measured_without_the_call_has_the_box_matplotlib_gives(name, monkeypatch):
    """`text_extent` keeps a text's layout where it can read all that the layout depends on;
    without it, it measures the text every time: the box `get_window_extent` gives, however the
    text changed (the private path gives the same box: tests/test_legibility.py). Line spacing
    has a public getter from 3.11; the private attribute is what older ones read, so the
    getter is hidden here to take that path, then the attribute."""
    if name == "_linespacing":
        monkeypatch.delattr(Text, "get_linespacing", raising=False)
    fig, ax = _figure()
    texts = [ax.text(0.3, 0.4, "b0"), ax.set_xlabel("time (ms)"), ax.text(0.5, 0.5, "two\nlines", rotation=30)]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    changes = [lambda t: None, lambda t: t.set_text("b12"), lambda t: t.set_fontsize(14),
               lambda t: t.set_multialignment("right"), lambda t: t.set_linespacing(2.0),
               lambda t: t.set_rotation(90), lambda t: t.set_ha("right"), lambda t: t.set_position((0.1, 0.9))]
    for change in changes:
        for text in texts:
            change(text)
            used, fallback = _both([name], lambda: (mpl_gate.layout_state(text), text_extent(text, renderer).bounds))
            assert used[0] is not None and fallback[0] is None
            assert used[1] == fallback[1] == text.get_window_extent(renderer).bounds


def test_line_spacing_reads_the_same_from_the_getter_and_the_attribute(monkeypatch):
    text = _figure()[1].text(0, 0, "two\nlines", linespacing=1.7)
    public = mpl_gate.layout_state(text)
    monkeypatch.delattr(Text, "get_linespacing", raising=False)
    assert mpl_gate.layout_state(text) == public == (None, 1.7)


# --- glyphs and font heights kept by the slider's renderer -------------------------------------

GLYPH_CALLS = ("_prepare_font", "_layout", "_set_transform", "_render_glyph", "_renderer")
GLYPHS = (*GLYPH_CALLS, "_get_font_height_metrics", "_find_fonts_by_props")

# how each fallback shows: a plain Agg renderer, one that is not asked for font heights, or
# font files not known (its heights then answered as unknown, and matplotlib reads them itself)
FELL_BACK = {**{name: lambda r: type(r) is RendererAgg for name in GLYPH_CALLS},
             "_get_font_height_metrics": lambda r: not hasattr(r, "_get_font_height_metrics"),
             "_find_fonts_by_props": lambda r: mpl_gate.font_files(FontProperties()) is None}


def _texts_drawn(fig, ax, name: str) -> tuple:
    """Labels of every kind a slider draws (several lines, rotations, sizes, a weight, glyphs
    from a fallback font): their pixels and boxes, and whether `name`'s fallback shows."""
    for i, text in enumerate(["b0", "#3: 0\nexposed", "bucket ready", "rank 1 all-reduce", "ÿ‖θ̄‖ g"]):
        ax.text(0.05 + 0.013 * i, 0.1 + 0.17 * i, text, fontsize=7 + i, rotation=(0, 0, 30, 90, 0)[i],
                weight=("normal", "bold")[i % 2], linespacing=(1.2, 2.0)[i % 2])
    ax.set_title("live run; 3.04 Gb/s", loc="left")
    pixels = _pixels(fig)
    renderer = fig.canvas.get_renderer()
    fell_back = FELL_BACK[name](renderer)
    return pixels, [t.get_window_extent(renderer).bounds for t in ax.texts], fell_back


@pytest.mark.skipif(not mpl_gate.keeps_glyphs(FigureCanvasAgg(Figure()).get_renderer()),
                    reason=f"matplotlib {matplotlib.__version__} draws plain Agg text: the fallback is all there is")
@pytest.mark.parametrize("name", GLYPHS)
def test_text_drawn_without_the_call_is_the_pixels_of_the_kept_glyphs(name):
    """Without a call the glyph caches stand on, the slider's canvas draws with a plain Agg
    renderer; without the font heights, matplotlib reads them itself: the same pixels and boxes,
    also when a canvas that drew from its caches draws again without them."""
    used, fallback = _both([name], lambda: _texts_drawn(*_figure(CachingCanvasAgg), name))
    assert not used[2] and fallback[2]
    assert np.array_equal(used[0], fallback[0]) and used[1] == fallback[1]
    fig, ax = _figure(CachingCanvasAgg)
    kept = _texts_drawn(fig, ax, name)
    mpl_gate.disable([name])
    assert FELL_BACK[name](fig.canvas.get_renderer())
    assert np.array_equal(_pixels(fig), kept[0])

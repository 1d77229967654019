"""dpviz.widgets.glyphs: text drawn from kept layouts and glyph bitmaps is exactly the pixels
matplotlib's Agg renderer draws, wherever the text lands (whole and sub-pixel offsets)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dpviz.plots import mpl_gate
from dpviz.widgets.glyphs import CachingCanvasAgg, CachingRendererAgg

# the caches are on only where this matplotlib has the private calls they stand on (3.11's,
# `mpl_gate.keeps_glyphs`); elsewhere the canvas draws as plain Agg does, which the last test
# checks (and tests/test_mpl_gate.py, with each of those calls turned off)
CACHES_ON = mpl_gate.keeps_glyphs(FigureCanvasAgg(Figure(figsize=(2, 1))).get_renderer())
needs_caches = pytest.mark.skipif(not CACHES_ON, reason=f"the glyph caches are off on matplotlib "
                                                        f"{matplotlib.__version__}")


def _pixels(canvas_type, shift: float) -> np.ndarray:
    fig = Figure(figsize=(4, 3), dpi=100)
    canvas = canvas_type(fig)
    ax = fig.add_subplot()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    for i, text in enumerate(["b0", "#3: 0", "bucket ready", "rank 1 all-reduce", "ÿ‖θ̄‖ g"]):
        # positions a pixel's 1/7ths apart, shifted by whole and fractional pixels between draws
        ax.text(0.05 + 0.013 * i + shift, 0.1 + 0.17 * i + shift / 3, text, fontsize=7 + i,
                rotation=(0, 0, 30, 90, 0)[i], color="#222222")
    for size, weight in ((7, "normal"), (12, "normal"), (12, "bold")):   # one string, three fonts
        ax.text(0.7, 0.1 + size / 30 + (weight == "bold") * 0.2, "b0", fontsize=size, weight=weight)
    ax.set_title("live run; 3.04 Gb/s", loc="left")
    ax.legend(handles=ax.plot([0, 1], [0, 1], label="parameter averaging every 8 steps")[:1])
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy(), canvas


@needs_caches
@pytest.mark.parametrize("shift", [0.0, 0.1, 0.0137, 0.25])
def test_cached_text_is_the_pixels_agg_draws(shift):
    expected, _ = _pixels(FigureCanvasAgg, shift)
    drawn, canvas = _pixels(CachingCanvasAgg, shift)
    assert isinstance(canvas.get_renderer(), CachingRendererAgg)
    assert np.array_equal(drawn, expected)


def _label_figure(canvas_type, x: float):
    fig = Figure(figsize=(4, 3), dpi=100)
    canvas = canvas_type(fig)
    label = fig.add_subplot().text(x, 0.5, "#3: 0 exposed 3.1 ms", fontsize=9)
    canvas.draw()
    return canvas, label


@needs_caches
def test_a_redraw_from_the_caches_at_new_places_is_the_pixels_agg_draws():
    """The same label moved by whole pixels and by fractions: glyphs come from the caches."""
    canvas, label = _label_figure(CachingCanvasAgg, 0.1)
    glyphs = canvas.get_renderer()._glyphs
    kept = dict(glyphs)
    for x in (0.1 + 3 / 400, 0.1 + 0.37 / 400, 0.55, 0.1):   # the axes are ~300 px wide
        label.set_x(x)
        canvas.draw()
        expected, _ = _label_figure(FigureCanvasAgg, x)
        assert np.array_equal(np.asarray(canvas.buffer_rgba()), np.asarray(expected.buffer_rgba()))
    assert canvas.get_renderer()._glyphs is glyphs and kept.items() <= glyphs.items()


@pytest.mark.parametrize("text, size, weight, rotation", [("b0", 8, "normal", 0), ("rank 1 all-reduce\nbucket", 9, "bold", 30),
                                                          ("ÿ‖θ̄‖ g", 12, "normal", 90)])
def test_kept_font_heights_lay_text_out_as_matplotlib_does(text, size, weight, rotation):
    """The renderer's kept font heights give every text the layout (boxes, line places) that
    matplotlib computes from the font's tables itself."""
    layouts = []
    for canvas_type in (FigureCanvasAgg, CachingCanvasAgg, CachingCanvasAgg):   # the second: from the kept heights
        fig = Figure(figsize=(4, 3), dpi=100)
        canvas = canvas_type(fig)
        label = fig.add_subplot().text(0.3, 0.4, text, fontsize=size, weight=weight, rotation=rotation)
        renderer = canvas.get_renderer()
        layouts.append(label._get_layout(renderer))
        if canvas_type is CachingCanvasAgg:
            layouts.append(label._get_layout(renderer))
    plain = layouts[0]
    for kept in layouts[1:]:
        assert np.array_equal(kept[0].get_points(), plain[0].get_points())
        assert kept[1:] == plain[1:]


def test_the_canvas_caches_where_matplotlib_has_what_the_caches_stand_on():
    """With the matplotlib installed here the slider canvas draws text from its caches; where
    the private calls are missing (`mpl_gate.keeps_glyphs` False) it keeps a plain Agg renderer."""
    renderer = CachingCanvasAgg(Figure(figsize=(2, 1))).get_renderer()
    assert isinstance(renderer, CachingRendererAgg) == mpl_gate.keeps_glyphs(renderer) == CACHES_ON

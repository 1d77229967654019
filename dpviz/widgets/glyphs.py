"""Text drawn from kept layouts and glyph bitmaps, for a figure redrawn on every knob move.

matplotlib's Agg renderer lays every string out again and renders every glyph again on
every draw. A slider's figure draws the same labels move
after move ("b0", "#3: 0", a legend's entries) at new places, so `CachingRendererAgg` keeps
both: a string's layout by (string, font), and each glyph's bitmap by its font, size,
transform and the sub-pixel part of where it lands. FreeType renders a glyph moved by whole
pixels as the same bitmap moved by those pixels, so a kept bitmap placed at the new whole-
pixel offset is the pixels Agg would render (tests/test_glyphs.py compares them).
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.font_manager import get_font

from dpviz.plots import mpl_gate

KEPT_MAX = 8192   # entries per cache; a slider's labels need a few hundred


@mpl_gate.answers_font_heights
class CachingRendererAgg(RendererAgg):
    """RendererAgg whose plain text (not mathtext) reuses kept layouts and glyph bitmaps.
    It stands on private matplotlib calls (`mpl_gate.keeps_glyphs`); a canvas uses it only
    where this matplotlib has them (`CachingCanvasAgg`)."""

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath:
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        features = mtext.get_fontfeatures() if mtext is not None else None
        language = mtext.get_language() if mtext is not None else None
        size = prop.get_size_in_points()
        layouts = _kept(self, "_layouts")
        # the font's properties themselves (what FontProperties hashes), not their hash: no collisions
        key = (s, tuple(prop.__dict__.values()), size, tuple(features) if features else None, language)
        items = layouts.get(key)
        if items is None:
            items = layouts[key] = mpl_gate.glyph_layout(mpl_gate.agg_font(self, prop), s, features, language)
        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        matrix = (0x10000 * np.array([[cos, -sin], [sin, cos]])).round().astype(int)
        glyphs, aa, paint = _kept(self, "_glyphs"), gc.get_antialiased(), mpl_gate.glyph_painter(self)
        for item in items:
            # where Agg's own text drawing places the glyph, in 1/64 pixel
            ox = round(0x40 * (x + item.x * cos - item.y * sin))
            oy = round(0x40 * (self.height - y + item.x * sin + item.y * cos))
            font = item.ft_object
            gkey = (font.fname, font.postscript_name, size, item.glyph_index, matrix.tobytes(), aa,
                    ox & 63, oy & 63)
            kept = glyphs.get(gkey)
            if kept is None:
                font.set_size(size, self.dpi)
                kept = glyphs[gkey] = mpl_gate.render_glyph(font, item.glyph_index, matrix, (ox & 63, oy & 63), aa)
            buffer, left, top = kept
            left, top = left + (ox >> 6), top + (oy >> 6)
            paint(buffer, left, int(self.height) - top + buffer.shape[0], 0, gc)

    def font_height_metrics(self, prop):
        """(ascent, descent, line gap) in pixels of the font `prop` names, kept by its properties.

        matplotlib's text layout asks a renderer that answers it for them
        (`mpl_gate.answers_font_heights`); otherwise it finds the font and reads its OS/2 or
        hhea table on every layout, which was a third of laying out a kept label (each move
        lays out every label twice: to place it, and to draw it). The numbers are the layout's
        own, read the same way (tests/test_glyphs.py compares a layout with and without)."""
        metrics = _kept(self, "_heights")
        key = (tuple(prop.__dict__.values()), self.dpi)
        if key not in metrics:
            metrics[key] = _font_height_metrics(prop, self.dpi)
        return metrics[key]


def _font_height_metrics(prop, dpi: float) -> tuple:
    """What matplotlib's text layout reads from the font's tables (None, None, None when it
    has neither, and measures "lp" instead; or when this matplotlib does not say which font
    it lays out in, `mpl_gate.font_files`, and finds the font itself)."""
    files = mpl_gate.font_files(prop)
    if files is None:
        return None, None, None
    font = get_font(files)
    for table_name, gap_key, ascent_key, descent_key in (
            ("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"), ("hhea", "lineGap", "ascent", "descent")):
        table = font.get_sfnt_table(table_name)
        if table is None:
            continue
        scale = 1 / font.get_sfnt_table("head")["unitsPerEm"] * prop.get_size_in_points() * dpi / 72
        return table[ascent_key] * scale, -table[descent_key] * scale, table[gap_key] * scale
    return None, None, None


def _kept(renderer, name: str) -> dict:
    cache = renderer.__dict__.setdefault(name, {})
    if len(cache) > KEPT_MAX:
        cache.clear()
    return cache


class CachingCanvasAgg(FigureCanvasAgg):
    """An Agg canvas whose renderer is a `CachingRendererAgg` (kept while the size holds), where
    this matplotlib has what it stands on (`mpl_gate.keeps_glyphs`); a plain Agg renderer
    elsewhere."""

    def get_renderer(self):
        renderer = super().get_renderer()
        if type(renderer) in (RendererAgg, CachingRendererAgg):   # same state, text drawn from the caches or not
            renderer.__class__ = CachingRendererAgg if mpl_gate.keeps_glyphs(renderer) else RendererAgg
        return renderer

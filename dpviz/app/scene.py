"""What every dpviz scene shares: reading its record, the palette, small text helpers.

Scenes never run torch: they read a record saved by a live run. From the `manim` command
line the record comes from the DPVIZ_RECORD environment variable; `dpviz animate` passes
it directly.
"""
from __future__ import annotations

import os

from manim import DOWN, DashedVMobject, Rectangle, Scene, Text, VGroup, config

from dpviz.core.record import load
from dpviz.plots import style

FONT_SIZE = 24


class RecordScene(Scene):
    """A Scene built from one record (`record=` or $DPVIZ_RECORD)."""

    RECORD_TYPE: type | None = None

    def __init__(self, record=None, **kwargs):
        if record is None:
            path = os.environ.get("DPVIZ_RECORD")
            if not path:
                raise ValueError(f"{type(self).__name__} draws a recorded run: set DPVIZ_RECORD to a "
                                 "record file (e.g. one written by `dpviz run --out DIR`) or use "
                                 "`dpviz animate`")
            record = load(path, expect=self.RECORD_TYPE)
        self.record = record
        super().__init__(**kwargs)
        self.camera.background_color = style.BACKGROUND

    def caption(self, text: str, size: int = FONT_SIZE) -> Text:
        """A caption line at the bottom of the frame (Text, never LaTeX)."""
        return fit(Text(text, font_size=size, color=style.TEXT)).to_edge(DOWN)


def fit(text: Text, margin: float = 0.4) -> Text:
    """`text`, scaled down where it is wider than the frame: captions built from a record can
    run long, and a line cut off by the frame's edge cannot be read."""
    room = config.frame_width - 2 * margin
    return text.scale_to_fit_width(room) if text.width > room else text


def link_box(left: float, right: float, y: float, height: float, color: str) -> VGroup:
    """A transfer on the emulated link as the figures draw it: a dotted outline in the
    bucket's colour, faintly filled (waiting that burns no CPU). `y` is the box's centre."""
    width = max(0.01, right - left)
    fill = Rectangle(width=width, height=height, stroke_width=0, fill_color=color, fill_opacity=0.15)
    outline = Rectangle(width=width, height=height, stroke_width=2, stroke_color=color, fill_opacity=0)
    box = VGroup(fill, DashedVMobject(outline, num_dashes=max(4, int(width * 12))))
    return box.move_to([(left + right) / 2, y, 0])

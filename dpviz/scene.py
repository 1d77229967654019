"""What every dpviz scene shares: reading its record, the palette, small text helpers.

Scenes never run torch: they read a record saved by a live run. From the `manim` command
line the record comes from the DPVIZ_RECORD environment variable; `dpviz animate` passes
it directly.
"""
from __future__ import annotations

import os

from manim import DOWN, Scene, Text

from dpviz.plots import style
from dpviz.record import load

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
        return Text(text, font_size=size, color=style.TEXT).to_edge(DOWN)

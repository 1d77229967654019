"""The frame of a figure redrawn in place: the artists a knob's move does not change.

A slider's figure keeps its layout and its axis limits between moves (`dpviz.widgets.slider`),
so its axes' frame (spines, ticks, lane names, axis labels, legend) comes out the
same pixels move after move, and rendering its text glyph by glyph was most of a move's Agg
draw. The frame is rasterized once and kept as a background; a move restores it and draws
only the changing artists over it (matplotlib's blitting). Two conditions keep that frame
exactly the pixels of a whole draw (tests/test_legibility.py compares them):
- the frame is redrawn whenever anything it shows changes: `frame_key` lists what it shows;
- artists a whole draw paints *after* a changing one (spines and ticks sit above data, the
  legend above texts) do not touch any changing artist: `touches` checks their boxes, and a
  move where one does is drawn whole.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.collections import Collection
from matplotlib.colors import to_rgba
from matplotlib.image import AxesImage
from matplotlib.text import Text
from matplotlib.transforms import Bbox, IdentityTransform

from dpviz.plots import mpl_gate
from dpviz.plots.legends import look
from dpviz.plots.legibility import Boxes, text_extent

PAD_PX = 2   # each side: half a 2-pt line, and a 1.4-pt box pad around boxed text; both sides: + an antialiased pixel


def frame_artists(ax) -> list[Any]:
    """The axes' artists that show the frame, not the data: patch, spines, axes, and the legend
    unless it is placed where the data leaves room (loc="best", code 0), which moves with the
    data. The source stamp is drawn with the data: its note (how drawn data was adjusted, e.g.
    all-reduce ends capped) comes and goes with the run. A legend whose place this matplotlib
    does not tell (`mpl_gate.legend_loc`) is drawn with the data too."""
    legend = [ax.legend_] if ax.legend_ is not None and mpl_gate.legend_loc(ax.legend_) not in (None, 0) else []
    return [ax.patch, *ax.spines.values(), ax.xaxis, ax.yaxis, *legend]


def changing_artists(ax) -> list[Any]:
    """Every other artist of the axes (data, labels, titles), in the order `Axes.draw` paints them."""
    frame = set(map(id, frame_artists(ax)))
    return sorted((a for a in ax.get_children() if id(a) not in frame), key=lambda a: a.get_zorder())


def frame_key(ax) -> tuple:
    """Everything the frame's pixels depend on besides the figure's kept layout: limits, scales,
    ticks and their labels, axis labels, spines, legend entries."""
    axes = tuple((axis.get_scale(), tuple(axis.get_view_interval()), _ticks_key(axis),
                  _params(axis.get_tick_params()), _params(axis.get_tick_params(which="minor")),
                  _text_key(axis.label))
                 for axis in (ax.xaxis, ax.yaxis))
    spines = tuple((name, s.get_visible(), look(s)) for name, s in ax.spines.items())
    leg = ax.legend_ if ax.legend_ in frame_artists(ax) else None
    legend = None if leg is None else (
        tuple(map(_text_key, [*leg.get_texts(), leg.get_title()])), tuple(map(look, leg.legend_handles)),
        str(mpl_gate.legend_loc(leg)), tuple(leg.get_bbox_to_anchor().bounds), leg.get_frame_on(),
        look(leg.get_frame()))
    return ax.axison, look(ax.patch), axes, spines, legend


def _ticks_key(axis) -> tuple:
    """The ticks a draw paints (in view, labels formatted, as `Axis.draw` gets them): each one's
    place, major or minor, and labels. One locator pass per axis: asking for the major and
    minor locations and labels one by one ran the locators six times."""
    return tuple((tick.get_loc(), mpl_gate.is_major(tick, axis), _text_key(tick.label1), _text_key(tick.label2))
                 for tick in mpl_gate.drawn_ticks(axis))


def frame_boxes(ax, renderer) -> list[Bbox]:
    """Where the frame's artists painted after the data lie (padded): all but the axes patch."""
    boxes = []
    for artist in frame_artists(ax)[1:]:
        if artist.get_visible():
            box = artist.get_tightbbox(renderer)
            if box is not None:
                boxes.append(box.padded(PAD_PX))
    return boxes


def touches(changing: list[Any], frame: list[Bbox], renderer) -> bool:
    """Whether any changing artist's painted box (clipped to its clip box, padded) meets any of
    the frame's boxes: there a whole draw would paint the frame over it, a blit under it. An
    artist whose box cannot be told counts as touching. The boxes are clipped, padded and
    tested all at once (as `place_labels` tests its labels): one at a time, as `Bbox`es, was
    half of this test's cost."""
    boxes, clips = [], []
    for artist in changing:
        if not artist.get_visible() or (isinstance(artist, Text) and not artist.get_text()):
            continue   # nothing painted (an empty title's box is a unit box at the origin)
        if isinstance(artist, Collection) and not artist.get_paths():
            continue
        if isinstance(artist, AxesImage):
            return True   # `Axes.draw` paints images even when animated: in the frame too
        boxes.append(_painted_box(artist, renderer).extents)
        clip = artist.get_clip_box() if artist.get_clip_on() else None
        clips.append(_UNCLIPPED if clip is None else clip.extents)
    if not boxes:
        return False
    boxes, clips = np.array(boxes), np.array(clips)
    if not np.isfinite(boxes).all():
        return True
    # `Bbox.intersection` of each box (corners sorted) with its clip box: none where they part
    lo = np.maximum(np.minimum(boxes[:, :2], boxes[:, 2:]), np.minimum(clips[:, :2], clips[:, 2:]))
    hi = np.minimum(np.maximum(boxes[:, :2], boxes[:, 2:]), np.maximum(clips[:, :2], clips[:, 2:]))
    shown = (lo <= hi).all(axis=1)
    return Boxes(frame).overlap_any(np.hstack([lo[shown] - PAD_PX, hi[shown] + PAD_PX]))


_UNCLIPPED = (-np.inf, -np.inf, np.inf, np.inf)


def _painted_box(artist, renderer) -> Bbox:
    """An artist's box in pixels. A collection's `get_window_extent` is null for data-placed
    offsets (matplotlib counts it out of autoscale): its data limits, in pixels, instead
    (`_collection_box`). A plain text's box comes from its kept layout (`text_extent`: the
    box matplotlib gives)."""
    if isinstance(artist, Collection) and artist.axes is not None:
        return _collection_box(artist)
    if type(artist) is Text:   # an annotation's box also holds its arrow and bbox patch
        return text_extent(artist, renderer)
    return artist.get_window_extent(renderer)


def _collection_box(collection: Collection) -> Bbox:
    """A collection's data limits in pixels. Bars and lines (no offsets, no transform per
    path): the bounds of all their finite vertices through the collection's transform, in one
    numpy pass, where `get_datalim` measures them path by path (several collections a
    move). For a curve the control points' box holds the curve: a larger box can only make a
    move draw whole. Other collections (scatter's offsets): `get_datalim`."""
    data = collection.axes.transData
    paths = collection.get_paths()
    if not paths:
        return Bbox.null()
    if (len(collection.get_transforms()) or collection.get_offsets().any()
            or not isinstance(collection.get_offset_transform(), IdentityTransform)):
        return collection.get_datalim(data).transformed(data)
    points = collection.get_transform().transform(np.concatenate([p.vertices for p in paths]))
    points = points[np.isfinite(points).all(axis=1)]
    return Bbox([points.min(axis=0), points.max(axis=0)]) if len(points) else Bbox.null()


def _text_key(t) -> tuple:
    return (t.get_text(), t.get_fontsize(), to_rgba(t.get_color()), t.get_rotation(), t.get_visible(),
            t.get_fontweight(), t.get_fontfamily()[0], t.get_ha(), t.get_va(), t.get_alpha())


def _params(params: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in params.items()))

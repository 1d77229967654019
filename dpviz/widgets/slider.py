"""Two panels every subject builds on: step through a record, or re-run on a knob change.

Widgets hold no torch code: `rerun` takes a callable that returns a record (usually a
`functools.partial` of a dpviz run function bound to a warm Cluster), and a draw function.
"""
from __future__ import annotations

import html
import time
from typing import Any, Callable, Sequence

import ipywidgets as w
import numpy as np

from dpviz.plots import style
from dpviz.widgets import png
from dpviz.widgets.frame import changing_artists, frame_boxes, frame_key, touches
from dpviz.widgets.recorded import recordable

DPI = 100


class FigurePanel:
    """One matplotlib figure and one axes, redrawn in place by `draw(ax, value)` and shown
    as PNG bytes in an Image widget.

    Why not a new pyplot figure per move displayed in an Output: that path creates a figure,
    lays it out, draws it twice (the inline backend's tight bounding box) and re-sends the
    whole output. Here the first value is laid out by constrained layout, and the layout is
    then kept: a knob changes the data, not the labels around the axes, and solving the
    layout again was a third of each move's draw. The limits of the axes the draw autoscales
    are kept too (`limits`, grown when a value's data does not fit, shrunk back when
    one needs far less: `SHRINK_BEYOND`): moves compare on one
    scale, and the frame (ticks, lane names, legend: `dpviz.widgets.frame`) stays the same
    pixels, rasterized once; a move draws only what changed over it. Its text comes from kept layouts and glyph
    bitmaps (`dpviz.widgets.glyphs`), and a re-run slider shows the titles, which carry each
    run's numbers, as an HTML caption (`caption`). benchmarks/knob_latency.py measures it all.
    """

    def __init__(self, draw: Callable[[Any, Any], None], figsize: tuple[float, float],
                 caption: bool = False):
        """`caption`: show the axes' titles as text above the image (`caption`), not in its
        pixels. A re-run's title holds that run's numbers, so it changes on every move, and
        rasterizing its glyphs was a large share of a move's drawing (the frame's texts
        are kept pixels); the browser sets the same words as HTML for free."""
        from matplotlib.figure import Figure

        from dpviz.widgets.glyphs import CachingCanvasAgg

        self.draw = draw
        self.caption = w.HTML(layout=w.Layout(width=f"{int(figsize[0] * DPI)}px")) if caption else None
        self.figure = Figure(figsize=figsize, dpi=DPI, layout="constrained")
        CachingCanvasAgg(self.figure)  # no pyplot: no global state; kept glyphs (`glyphs`)
        self.widget = w.Image(format="png", layout=w.Layout(width=f"{int(figsize[0] * DPI)}px"))
        self.axes = None
        self.limits: tuple[tuple[float, float], tuple[float, float]] | None = None   # (x, y)
        self.scaled: tuple[bool, bool] | None = None   # (x, y): autoscaled by the draw, so kept
        self.frames: list[list] = []   # [frame_key, pixels, boxes] kept, the latest last (FRAMES_KEPT)
        self.reused_frame = False   # whether the last frame was restored rather than drawn

    def redraw(self, value: Any) -> None:
        """Draw `value` on the emptied axes at the kept limits and rasterize it (once); the
        first value also lays the figure out, later ones keep that layout."""
        if self.axes is None:
            self.axes = self.figure.add_subplot()
            if self.caption is not None:
                for title in style.titles(self.axes):
                    title.set_visible(False)   # kept by set_title: no room laid out, no pixels
            self._plot(value)
            self.figure.canvas.draw()
            self.figure.set_layout_engine("none")   # the axes keep the positions just solved
        else:
            self._plot(value)
        if self.caption is not None:
            self.caption.value = caption_html(self.axes)
        self._rasterize()

    def _plot(self, value: Any) -> None:
        """Draw `value` at the kept limits; where its data does not fit them (with autoscale's
        margins), grow them and draw again: a draw places its labels at its limits. An axis
        whose limits the first draw set itself (not autoscaled) is left to the draw."""
        self._plot_at(value, self.limits)
        if self.scaled is None:
            self.scaled = (self.axes.get_autoscalex_on(), self.axes.get_autoscaley_on())
        elif (needed := _grown(self.axes, self.limits, self.scaled)) != self.limits:
            self._plot_at(value, needed)
        self.limits = (self.axes.get_xlim(), self.axes.get_ylim())

    def _plot_at(self, value: Any, limits) -> None:
        _empty(self.axes)
        if limits is not None:
            if self.scaled[0]:
                self.axes.set_xlim(limits[0])
            if self.scaled[1]:
                self.axes.set_ylim(limits[1])
        self.draw(self.axes, value)

    def _rasterize(self) -> None:
        """Restore the kept frame and draw the changing artists over it; draw the frame first
        when it is new, the whole figure (in its own order) when a changing artist touches it."""
        ax, canvas = self.axes, self.figure.canvas
        changing, key, renderer = changing_artists(ax), frame_key(ax), canvas.get_renderer()
        frame = self._frame(key, renderer)
        self.reused_frame = False
        if touches(changing, frame[2], renderer):
            canvas.draw()
            return
        if frame[1] is None:
            for artist in changing:
                artist.set_animated(True)   # left out of a whole draw
            try:
                canvas.draw()
            finally:
                for artist in changing:
                    artist.set_animated(False)
            frame[1] = canvas.copy_from_bbox(self.figure.bbox)
        else:
            canvas.restore_region(frame[1])
            self.reused_frame = True
        for artist in changing:
            ax.draw_artist(artist)

    def _frame(self, key: tuple, renderer) -> list:
        """The kept [key, pixels, boxes] of the frame `key` names, the latest from now on; a new
        one (pixels None: drawn by the caller) where none is kept. A panel of toggles moves
        between a few settings whose frames differ (09b's memory band is labelled with its top,
        which keeping parameters after forward raises): each setting keeps its own frame."""
        for frame in self.frames:
            if frame[0] == key:
                self.frames.remove(frame)
                break
        else:
            frame = [key, None, frame_boxes(self.axes, renderer)]
        self.frames = [*self.frames[-(FRAMES_KEPT - 1):], frame]
        return frame

    def png(self) -> bytes:
        """The last rasterized frame as PNG bytes (no second draw, unlike savefig): RGB when
        opaque (every figure here has a white background), unfiltered rows deflated by ISA-L
        (`dpviz.widgets.png`): a small part of a move, where PIL's encoder was a large one."""
        return png.encode_rgba(np.asarray(self.figure.canvas.buffer_rgba()))

    def show(self, value: Any) -> None:
        self.redraw(value)
        self.widget.value = self.png()


def caption_html(ax) -> str:
    """The axes' non-empty titles as HTML lines, in the figure's text colour and title size."""
    lines = [html.escape(line) for t in style.titles(ax) for line in t.get_text().splitlines()]
    size = max(t.get_fontsize() for t in style.titles(ax))
    return (f'<div style="color:{style.TEXT};font-size:{size * 1.33:.0f}px;line-height:1.3;white-space:normal">'
            + "<br>".join(lines) + "</div>")


def _empty(ax) -> None:
    """Take off `ax` what a draw puts on it (artists, legend, titles, axis labels, limits, the
    colour cycle), keeping its axis objects and their ticks. `ax.clear()` rebuilds both
    axes and every tick, which a move then lays out again, a large share of a 24-bucket
    timeline's move. A draw sets its own ticks, scales and limits on every call
    (tests/test_legibility.py checks that a move's pixels are those of a cleared axes)."""
    for artist in [*ax.collections, *ax.patches, *ax.lines, *ax.texts, *ax.images, *ax.artists,
                   *ax.tables, *([ax.legend_] if ax.legend_ is not None else [])]:
        artist.remove()
    for loc in ("left", "center", "right"):
        ax.set_title("", loc=loc)
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.relim()                      # no artists left: the data limits are empty again
    ax.set_autoscale_on(True)
    ax.set_prop_cycle(None)


# Frames a figure keeps (`FigurePanel._frame`), each its figure's pixels (~2.5 MB at 11 x 5.6 in):
# as many as a toggle panel's settings differ in frame, for 09b's three toggles.
FRAMES_KEPT = 4

# An end of the kept limits that grows keeps a tenth of the span to spare: a live step's time
# jitters by a few percent from run to run, and each growth draws the plot and its frame again.
GROW_SPARE = 0.1
# Kept limits more than this many times the data's span (with margins and spare, ×1.2) shrink
# back to what the value needs: one slow run (a 409 ms step among ~130 ms ones) must not
# squeeze every later move into a corner of its axis. Live steps of one slider differ by up
# to ~1.5× under load (03's caps: 225 to 330 ms, measured with other work running); that must
# keep the limits, and their frame, from move to move (tests/test_legibility.py).
SHRINK_BEYOND = 2.5


def _grown(ax, kept, scaled):
    """The kept (x, y) limits, on the `scaled` axes, with each end the axes' data now passes
    moved out to autoscale's end (margins included) and a spare, and limits far wider than the
    data needs (SHRINK_BEYOND) brought back to it; the axes keep their limits."""
    wanted = []
    for name, limits, auto_on in zip("xy", kept, scaled):
        lo, hi = sorted(limits)
        data_lo, data_hi = sorted(getattr(ax.dataLim, f"interval{name}"))
        fits = lo <= data_lo and data_hi <= hi
        if not auto_on or not np.isfinite([data_lo, data_hi]).all() or (fits and not _roomy(ax, name, lo, hi)):
            wanted.append(limits)
            continue
        auto_lo, auto_hi = _autoscaled(ax, name)
        linear = getattr(ax, f"get_{name}scale")() == "linear"
        if fits:   # far too roomy: back to what this value needs, with the spare
            spare = GROW_SPARE * (auto_hi - auto_lo) if linear else 0.0
            new_lo, new_hi = max(lo, auto_lo - spare), min(hi, auto_hi + spare)
        else:
            spare = GROW_SPARE * (max(hi, auto_hi) - min(lo, auto_lo)) if linear else 0.0
            new_lo = lo if lo <= data_lo else auto_lo - spare
            new_hi = hi if data_hi <= hi else auto_hi + spare
        wanted.append((new_lo, new_hi) if limits[0] <= limits[1] else (new_hi, new_lo))
    return tuple(wanted)


def _roomy(ax, name: str, lo: float, hi: float) -> bool:
    """Whether the kept limits (lo, hi) span more than SHRINK_BEYOND times the data's span, on
    the axis' own scale (log units on a log axis): only then is autoscale asked what the data
    needs, which a move where nothing changed would pay for nothing."""
    transform = getattr(ax, f"{name}axis").get_transform()
    (k0, k1), (d0, d1) = transform.transform([lo, hi]), transform.transform(getattr(ax.dataLim, f"interval{name}"))
    return bool(np.isfinite([k0, k1, d0, d1]).all() and abs(k1 - k0) > SHRINK_BEYOND * abs(d1 - d0) * (1 + 2 * GROW_SPARE))


def _autoscaled(ax, name: str) -> tuple[float, float]:
    """The (low, high) limits autoscale gives the axes' data on axis `name` (margins
    included); the axes keep the limits they have."""
    drawn = getattr(ax, f"get_{name}lim")()
    getattr(ax, f"set_autoscale{name}_on")(True)
    ax.autoscale_view(scalex=name == "x", scaley=name == "y")
    auto = sorted(getattr(ax, f"get_{name}lim")())
    getattr(ax, f"set_{name}lim")(drawn)
    return auto[0], auto[1]


def stepper(n: int, draw: Callable[[Any, int], None], label: str = "step",
            figsize: tuple[float, float] = (9, 3.5), interval_ms: int = 900) -> w.VBox:
    """Play button + slider over `n` recorded steps; `draw(ax, i)` draws step i. While a site
    is built every step is recorded (`dpviz.widgets.recorded`): play and slider move offline."""
    if n < 1:
        raise ValueError("nothing to step through: the record has no steps")
    figure = FigurePanel(draw, figsize)
    play = w.Play(min=0, max=n - 1, interval=interval_ms, description="play")
    slider = w.IntSlider(min=0, max=n - 1, description=label, continuous_update=True)
    w.jslink((play, "value"), (slider, "value"))
    slider.observe(lambda change: figure.show(change["new"]), names="value")
    figure.show(0)
    return recordable(w.VBox([w.HBox([play, slider]), figure.widget]), f"{label} slider",
                      controls=[slider], views=[figure.widget])


def starts_note(cluster: Any, starts_before: int) -> str:
    """'; started 2 ranks in 3.91 s' when `cluster` (anything with `starts`, `start_seconds`
    and `world_size`, e.g. a dpviz Cluster) started its ranks since `starts_before`: a move
    that waits seconds for new ranks says so, instead of looking like a slow re-run."""
    if cluster is None or cluster.starts == starts_before:
        return ""
    verb = "restarted" if cluster.starts > 1 else "started"
    return f"; {verb} {cluster.world_size} ranks in {cluster.start_seconds:.2f} s"


def status_line() -> w.HTML:
    """A panel's status line, as HTML that wraps at its width: a Label never wraps (its CSS cuts
    a long line to an ellipsis: 03's "…and DD"), and a status line grows with a run's notes.
    In a row it takes the room its neighbours leave; in a column, the column's width."""
    return w.HTML(layout=w.Layout(width="100%", flex="1 1 0%", min_width="0"))


def say(line: w.HTML, text: str) -> None:
    """Show `text` on a `status_line`: as text (escaped), wrapping."""
    line.value = f'<div style="white-space:normal;line-height:1.4">{html.escape(text, quote=False)}</div>'


def start_ranks(cluster: Any, status: w.HTML, doing: str) -> None:
    """Before a move's run: where `cluster`'s ranks were stopped (`cluster.close()` in a later
    section), say in the panel's `status` line that they restart (seconds) and start them
    without the launcher's stderr note, which JupyterLab shows in red in its log console."""
    if cluster is None or cluster.alive:
        return
    say(status, f"restarting {cluster.world_size} ranks (they were stopped), then {doing}…")
    cluster.start(announce=False)


def light_run_note(record: Any) -> str:
    """What a slider's light run (`config.for_slider`) does that a plain run does not, for its
    status line: a learner should know the drawn DDP skipped its start-up sync."""
    config = getattr(record, "config", None)
    if not isinstance(config, dict) or config.get("warmup") != "light":
        return ""
    return ("; a light run: only the drawn step is profiled, and DDP skips its start-up "
            "broadcast where every rank already holds the same weights")


def rerun(values: Sequence[Any], run: Callable[[Any], Any], draw: Callable[[Any, Any], None],
          label: str, value: Any = None, figsize: tuple[float, float] = (9, 3.5),
          format_value: Callable[[Any], str] = str, cluster: Any = None,
          note: Callable[[Any, Any], str] | None = None) -> w.VBox:
    """A slider over `values`; each release re-runs `run(value)` live and draws its record.
    `format_value` names each value on the slider (e.g. 'one bucket' rather than 4096.0).
    `cluster`, the one `run` uses, lets the status line say when a move (re)started ranks;
    `note(value, record)`, what the run measured, follows the move's time on the status line
    (e.g. a `widgets.spread.SettingSpread`'s).
    While a site is built every value is run now and recorded (`dpviz.widgets.recorded`)."""
    figure = FigurePanel(draw, figsize, caption=True)
    slider = w.SelectionSlider(options=[(format_value(v), v) for v in values],
                               value=value if value is not None else values[0],
                               description=label, continuous_update=False,
                               style={"description_width": "initial"},   # the whole label shows
                               layout=w.Layout(width="460px"))
    status = status_line()

    def update(choice: Any) -> None:
        say(status, f"running {label}={format_value(choice)} on live ranks…")
        t0, starts = time.perf_counter(), cluster.starts if cluster is not None else 0
        try:
            start_ranks(cluster, status, f"running {label}={format_value(choice)}")
            record = run(choice)
        except Exception as err:  # a failed run is shown, not swallowed: the panel says why
            say(status, f"{label}={format_value(choice)}: {type(err).__name__}: {err}")
            raise
        t1 = time.perf_counter()
        figure.show(record)
        measured = f"; {note(choice, record)}" if note is not None else ""
        say(status, f"{label}={format_value(choice)}: re-ran live in {t1 - t0:.2f} s{measured}"
                    f"{starts_note(cluster, starts)}, drawn in {time.perf_counter() - t1:.2f} s"
                    f"{light_run_note(record)}")

    slider.observe(lambda change: update(change["new"]), names="value")
    update(slider.value)
    panel = w.VBox([w.HBox([slider, status]), figure.caption, figure.widget])
    return recordable(panel, f"{label} slider", controls=[slider], views=[status, figure.caption, figure.widget])


def link_panel(run: Callable[[float], Any], value: float, draw: Callable[[Any, Any], None],
               gbps: Sequence[float], figsize: tuple[float, float], cluster: Any = None,
               note: Callable[[Any, Any], str] | None = None) -> w.VBox:
    """A slider over an emulated link's bandwidth (Gb/s): each release calls `run(gbps)` and
    draws its record with `draw` (`note`: as `rerun`'s). Every subject's link slider is this
    one (03's bucket timeline, 04's micro-step schedule)."""
    if value not in gbps:
        raise ValueError(f"value {value} is not one of {list(gbps)}")
    return rerun(list(gbps), run, draw, label="link Gb/s", value=value, figsize=figsize,
                 format_value=lambda g: f"{g:g}", cluster=cluster, note=note)

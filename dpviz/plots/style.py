"""One palette for every figure and animation: ranks, span kinds, buckets.

Manim scenes import these hex strings too, so a rank or a bucket has the same colour
in a lecture video as in the notebook figure next to it.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# Colour-blind-safe (Okabe–Ito) for ranks; compute vs communication kept apart by hue.
RANK_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
KIND_COLORS = {
    "forward": "#4C72B0",
    "backward": "#DD8452",
    "recompute": "#C44E52",
    "optimizer": "#55A868",
    "compute": "#8C8C8C",
    "allreduce": "#8172B3",
    "allreduce_launch": "#8172B3",
    "collective": "#937860",
    "memcpy": "#DA8BC3",
    "other": "#CCCCCC",
}
BUCKET_COLORS = ("#8172B3", "#64B5CD", "#CCB974", "#B07AA1", "#76B7B2", "#9C755F", "#FF9DA7", "#5F4B8B")
# Collectives other than DDP's bucketed all-reduces, coloured by op (trace.COMM_OPS' values).
OP_COLORS = {"all_reduce": "#8172B3", "all_gather": "#2A9D8F", "reduce_scatter": "#E76F51",
             "broadcast": "#937860", "reduce": "#6D597A", "all_to_all": "#E9C46A",
             "send_recv": "#264653", "barrier": "#B5B5B5", "gather": "#43AA8B",
             "scatter": "#F3722C", "other": "#CCCCCC"}
# An emulated link's transfer: white, dotted in its bucket's colour (`bars.link_bars` draws the
# dots as lines; a legend's handle, drawn once, uses this hatch).
LINK_HATCH = ".."
BACKGROUND = "#FFFFFF"
TEXT = "#222222"
MUTED = "#9E9E9E"
WRONG = "#D62728"      # what an exercise got wrong, beside the reference


def rank_color(rank: int) -> str:
    return RANK_COLORS[rank % len(RANK_COLORS)]


def bucket_color(index: int | None) -> str:
    return KIND_COLORS["allreduce"] if index is None else BUCKET_COLORS[index % len(BUCKET_COLORS)]


def op_color(op: str | None) -> str:
    return OP_COLORS.get(op or "other", OP_COLORS["other"])


def comm_color(span) -> str:
    """A bucketed all-reduce by its bucket, every other collective by its op."""
    if span.kind == "allreduce" and span.bucket is not None:
        return bucket_color(span.bucket)
    return op_color(span.op)


def kind_color(kind: str) -> str:
    return KIND_COLORS.get(kind, KIND_COLORS["other"])


_FOR_FILES: ContextVar[bool] = ContextVar("dpviz_figures_for_files", default=False)


@contextmanager
def figures_for_files() -> Iterator[None]:
    """Within it, `new_axes` makes plain `matplotlib.figure.Figure`s that pyplot never sees:
    for code that only writes figures to files (a CLI, a report page). Such code then needs
    neither pyplot's import nor `plt.close`, and a notebook shows none of them."""
    token = _FOR_FILES.set(True)
    try:
        yield
    finally:
        _FOR_FILES.reset(token)


def new_axes(ax=None, figsize=(10, 3.5)):
    """The given axes, or a fresh figure's (library code never calls plt.show()): a pyplot
    figure, which a notebook shows, except within `figures_for_files`."""
    return ax if ax is not None else new_axes_column(1, figsize)[0]


def new_axes_column(rows: int, figsize=(10, 7), sharex: bool = False) -> list:
    """`rows` axes stacked in one fresh figure (as `new_axes` makes it); `sharex`: one time
    scale for all, so two steps drawn one above the other compare by eye."""
    if _FOR_FILES.get():
        from matplotlib.figure import Figure

        axes = Figure(figsize=figsize, layout="constrained").subplots(rows, sharex=sharex, squeeze=False)
    else:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(rows, figsize=figsize, layout="constrained", sharex=sharex, squeeze=False)
    return list(axes[:, 0])


def tidy(ax):
    """The house style for every figure: no top or right frame."""
    ax.spines[["top", "right"]].set_visible(False)
    return ax


SOURCES = ("live", "loaded trace", "quoted", "model")
# set while `dpviz book` runs the notebooks: its value is the tag of the site's recorded views
RECORDING_ENV = "DPVIZ_RECORD_WIDGETS"
RECORDED_LIVE = "live, recorded at build time"   # how "live" is stamped then
TAG_PT = 7.0   # the source stamp's type, as a notebook shows it
COLUMN_IN = 11.0   # a notebook column: a wider figure is shown scaled down to it, its type too
SOURCE_GID = "dpviz-source"   # the gid of the stamp `tag` writes


def recording_tag() -> str | None:
    """The tag of the site's recorded views ("recorded at build time on <machine>, <date>")
    while `dpviz book` runs the notebooks, else None (a notebook in JupyterLab, a test)."""
    return os.environ.get(RECORDING_ENV) or None


def source_of(record) -> str:
    """Where a record's data came from: "loaded trace" for one built from profiler trace files
    (`dpviz.load_trace`), "model" for a predicted step (`dpviz.predict`), else "live"
    (recorded by dpviz on its own ranks)."""
    config = getattr(record, "config", None)
    source = config.get("source") if isinstance(config, dict) else None
    return {"trace": "loaded trace", "model": "model"}.get(source, "live")


def adjustment_of(record, micro_steps_drawn: bool = False) -> str:
    """How a record's drawn spans differ from its raw trace: dpviz ends every all-reduce no later
    than the micro-step that launched it (`dpviz.analysis.scan`); said only where that moved an end, which
    then sits exactly on its micro-step's end (an all-reduce the trace ended in time ends before).
    Said in what the figure draws: its micro-steps if it draws them, else the backward() call a
    micro-step closes right after (a figure with no micro-steps must not name one)."""
    spans = getattr(record, "spans", ())
    ends = {(s.rank, s.end_us) for s in spans if s.kind == "micro_step"}
    if not any(s.kind == "allreduce" and (s.rank, s.end_us) in ends for s in spans):
        return ""
    return "all-reduce ends capped at " + ("their micro-step" if micro_steps_drawn else "backward()'s return")


def tag(ax, *sources: str, note: str = ""):
    """Stamp above a figure's top-right corner where its data comes from, so a reader can tell a
    live measurement from a loaded trace, a quoted figure or a model: e.g. "live + model".
    While a site is built (`recording_tag`), "live" reads RECORDED_LIVE: the page shows the
    figure long after its run, and a saved PNG travels without the page's tag.

    `note` says how drawn data was adjusted, if it was (e.g. "all-reduce ends capped").
    """
    unknown = [s for s in sources if s not in SOURCES]
    if not sources or unknown:
        raise ValueError(f"sources must be some of {SOURCES}, got {sources!r}")
    live = RECORDED_LIVE if recording_tag() else "live"
    text = " + ".join(dict.fromkeys(live if s == "live" else s for s in sources)) + (f" · {note}" if note else "")
    # above the title, if there is one: a long left-aligned title would run into it
    lines = max((t.get_text().count("\n") + 1 for t in titles(ax) if t.get_text() and t.get_visible()),
                default=0)   # a hidden title (a slider's, shown as its caption) takes no room
    rise = 3 + lines * (ax.title.get_fontsize() * 1.25) + (6 if lines else 0)
    # 7 pt as shown: a figure wider than a notebook column is scaled down to it, its type too
    size = TAG_PT * max(1.0, ax.figure.get_figwidth() / COLUMN_IN)
    ax.annotate(text, xy=(1, 1), xycoords="axes fraction", xytext=(0, rise), textcoords="offset points",
                ha="right", va="bottom", fontsize=size, color=TEXT, gid=SOURCE_GID,
                bbox=dict(boxstyle="round,pad=0.2", fc="#F2F2F2", ec=MUTED, lw=0.5))
    return ax


def titles(ax) -> list:
    """The axes' three title Text artists: left, center, right."""
    from dpviz.plots import mpl_gate   # not at import: manim scenes take the palette without matplotlib

    left, right = mpl_gate.side_titles(ax)
    return [left, ax.title, right]


def tags_of(ax) -> list[str]:
    """The source stamps on an axes (what `tag` wrote), for tests and checks."""
    return [t.get_text() for t in ax.texts if t.get_gid() == SOURCE_GID]

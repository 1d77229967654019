"""No two labels overlap in the figures notebooks 03 and 04 draw, drawn from live records
with and without the emulated link (labels land where the data puts them)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from dpviz import run
from dpviz.core.bucket_layout import ONE_BUCKET_CAP_MB
from dpviz.core.link import as_link
from dpviz.lessons.accumulation import live as accumulation
from dpviz.lessons.accumulation.plots import plot_schedule, plot_sweep_bytes, plot_sweep_time
from dpviz.lessons.buckets.live import sweep_config
from dpviz.lessons.buckets.plots import (
    plot_bucket_timeline, plot_contrast, plot_gradient_sizes, plot_layout, plot_sweep,
)
from dpviz.lessons.buckets.records import BucketSweep, cap_row
from dpviz.plots.legibility import (
    floating_labels, fractional_ticks, hidden_texts, legends_across_axes, legends_over_bars, names_not_drawn,
    overdrawn_bars, overlapping_texts, shown_sizes, small_texts, texts_over_bars, texts_over_markers,
    title_missing_models,
)
from dpviz.plots.style import titles


@pytest.fixture(scope="module")
def records(cluster2):
    cfg = sweep_config(steps=3, link="classroom")
    caps = {cap: run(cfg.replace(bucket_cap_mb=cap), cluster=cluster2) for cap in (0.25, 1.0, 4.0, ONE_BUCKET_CAP_MB)}
    raw = run(cfg.replace(bucket_cap_mb=1.0, link=None), cluster=cluster2)
    acc = accumulation.DEMO_CONFIG.replace(link="classroom")
    ks = {k: run(acc, cluster=cluster2, accum_steps=k) for k in (1, 2, 4, 7, 8)}
    return caps, raw, ks


def _check(fig):
    try:
        assert overlapping_texts(fig) == []
        assert texts_over_bars(fig) == [] and small_texts(fig) == []
        # issue 42 item 12: the transfers and all-reduces of a live link run overlap in time
        assert overdrawn_bars(fig) == [] and floating_labels(fig) == [] and names_not_drawn(fig) == []
    finally:
        plt.close(fig)


def test_overlapping_texts_finds_a_collision():
    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, "#1: 0")
    ax.text(0.5, 0.5, "#2: 0")
    assert overlapping_texts(fig) == [("#1: 0", "#2: 0")]
    plt.close(fig)


CHECKS = (overlapping_texts, texts_over_bars, small_texts, shown_sizes, title_missing_models, legends_over_bars,
          legends_across_axes, fractional_ticks, overdrawn_bars, texts_over_markers, floating_labels,
          names_not_drawn, hidden_texts)


def _counting_draws(fig) -> list:
    draws = []
    fig.canvas.mpl_connect("draw_event", draws.append)
    return draws


def test_the_checks_of_one_figure_draw_it_once_and_measure_what_a_draw_before_each_gives():
    """tests/notebook_figures.py runs every check over each notebook figure: a draw per check
    would be most of the checks' time."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(8, 3), layout="constrained")
    ax.barh([0, 1], [3, 5], color=["#4C72B0", "#DD8452"], label="backward")
    ax.annotate("b0", (3, 0), xytext=(4, 0), textcoords="offset points")   # placed when drawn
    ax.legend(loc="upper right")
    bx.plot([1, 2, 4], [1, 3, 2], marker="o", label="mlp")
    bx.set_title("gpt and mlp")
    bx.set_xlabel("k")
    draws = _counting_draws(fig)
    once = [check(fig) for check in CHECKS]
    assert len(draws) == 1
    each = []
    for check in CHECKS:
        fig.canvas.draw()
        each.append(check(fig))
    assert once == each
    plt.close(fig)


def test_a_figure_changed_between_checks_is_drawn_again():
    fig, ax = plt.subplots(layout="constrained")
    ax.text(0.2, 0.5, "left")
    right = ax.text(0.8, 0.5, "right")
    draws = _counting_draws(fig)
    assert overlapping_texts(fig) == [] and len(draws) == 1
    assert overlapping_texts(fig) == [] and len(draws) == 1
    right.set_x(0.2)
    assert overlapping_texts(fig) == [("left", "right")] and len(draws) == 2
    plt.close(fig)


def test_a_label_on_a_bar_reads_only_inside_it_in_a_contrasting_colour():
    """Issue 30: 03's b0…bN "ready" labels landed on the backward bar, in the buckets' own hues."""
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.barh(0, 10, height=0.8, color="#E1812C")                # a backward bar (orange)
    ax.set_xlim(0, 12)
    ax.set_ylim(-1, 1)
    ax.text(5, 0, "in-bar", ha="center", va="center", color="black")        # reads: contrast 7
    ax.text(5, 0.2, "b2", ha="center", va="center", color="#CCB974")    # bucket yellow on orange
    ax.text(10, 0, "edge", ha="center", va="center", color="black")     # half on, half off
    ax.text(11, -0.8, "beside", ha="center", va="center", color="black")
    assert texts_over_bars(fig) == [("b2", "contrast 1.5 on its bar (< 3)"), ("edge", "crosses a bar's edge")]
    plt.close(fig)


def test_small_type_and_a_title_naming_fewer_models_than_drawn_are_caught():
    fig, ax = plt.subplots()
    ax.bar([0, 1, 2], [1, 2, 3])
    ax.set_xticks([0, 1, 2], ["model=mlp", "model=gpt", "model=cnn"])
    ax.set_title("measured after one real step, mlp, 263,425 parameters")    # issue 30, notebook 09
    ax.text(1, 1, "tiny", fontsize=6)
    assert title_missing_models(fig) == [("measured after one real step, mlp, 263,425 parameters", ["cnn", "gpt"])]
    assert small_texts(fig) == [("tiny", 6.0)]
    wide, bx = plt.subplots(figsize=(15.4, 2))      # shown scaled to an 11-inch column: 7 pt reads as 5
    bx.text(0.5, 0.5, "1.5", fontsize=7)
    assert ("1.5", 5.0) in small_texts(wide)
    assert min(pt for _, pt in shown_sizes(wide)) == pytest.approx(5.0)   # what the notebook test prints
    plt.close(wide)
    ax.set_title("measured after one real step: mlp 1, gpt 2, cnn 3 parameters")
    assert title_missing_models(fig) == []
    plt.close(fig)


def test_a_kept_layout_gives_the_box_matplotlib_gives():
    """`place_labels` measures its obstacles with layouts kept per text: every box must be the
    one `get_window_extent` gives, however the text changed since it was laid out."""
    from dpviz.plots.legibility import text_extent

    fig, ax = plt.subplots()
    texts = [ax.text(0.3, 0.4, "b0"), ax.set_xlabel("time (ms)"), ax.text(0.5, 0.5, "two\nlines", rotation=30)]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    changes = [lambda t: None, lambda t: t.set_text("b12"), lambda t: t.set_fontsize(14),
               lambda t: t.set_rotation(90), lambda t: t.set_ha("right"), lambda t: t.set_position((0.1, 0.9)),
               lambda t: t.set_fontweight("bold"), lambda t: t.set_va("top"), lambda t: t.set_visible(False)]
    for change in changes:
        for text in texts:
            change(text)
            assert text_extent(text, renderer).bounds == text.get_window_extent(renderer).bounds
    ax.set_xlim(0, 2)   # a data-placed text moves with the limits
    assert text_extent(texts[0], renderer).bounds == texts[0].get_window_extent(renderer).bounds
    plt.close(fig)


def test_bucket_figures_have_no_overlapping_labels(records):
    caps, raw, _ = records
    model = as_link(caps[1.0].config["link"]).model(2)
    for record in (caps[0.25], caps[1.0], raw):
        _check(plot_gradient_sizes(record).figure)
        _check(plot_layout(record).figure)
        _check(plot_bucket_timeline(record, model=model).figure)
    _check(plot_contrast(caps[1.0], caps[ONE_BUCKET_CAP_MB], model=model)[0].figure)
    sweep = BucketSweep(config={**caps[1.0].config, "bucket_cap_mb": None}, world_size=2,
                        rows=tuple(cap_row(r) for r in caps.values()))
    _check(plot_sweep(sweep).figure)


def test_accumulation_figures_have_no_overlapping_labels(records):
    _, _, ks = records
    for record in ks.values():
        _check(plot_schedule(record).figure)
    swept = accumulation.AccumulationSweep(config=ks[1].config, world_size=2,
                                           rows=tuple(accumulation.accumulation_row(r) for r in ks.values()))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8), layout="constrained")
    plot_sweep_bytes(swept, left)
    plot_sweep_time(swept, right)
    _check(fig)


@pytest.mark.parametrize("figure", ["bucket timeline", "accumulation schedule"])
def test_a_slider_figure_redrawn_in_place_stays_legible_and_returns_to_the_same_pixels(records, figure):
    """The widgets' figure keeps its first layout, axes and limits across moves (faster): every
    move must still hide colliding labels, and moving back and forth must repeat its frames."""
    from dpviz.widgets.slider import FigurePanel

    caps, _, ks = records
    if figure == "bucket timeline":
        draw, first, moves = (lambda ax, r: plot_bucket_timeline(r, ax=ax)), caps[1.0], \
            [caps[0.25], caps[4.0], caps[ONE_BUCKET_CAP_MB]]
    else:
        draw, first, moves = (lambda ax, r: plot_schedule(r, ax=ax)), ks[4], [ks[1], ks[8], ks[2]]
    fig = FigurePanel(draw, (11, 3.8), caption=True)   # as the re-run sliders draw it
    fig.show(first)
    for record in moves:
        fig.show(record)
        assert len(fig.figure.axes) == 1
        assert overlapping_texts(fig.figure) == []
    for _ in range(2):   # one round trip settles the limits (they shrink back after a far longer run)
        fig.show(first)
        frame = fig.png()
        fig.show(moves[0])
    fig.show(first)
    assert fig.png() == frame
    # a move measures labels on the kept layout without a second draw: it must hide what a
    # freshly laid-out figure of the same record at the same limits hides
    for record in moves:
        fig.show(record)
        fresh = FigurePanel(draw, (11, 3.8), caption=True)
        fresh.limits, fresh.scaled = fig.limits, fig.scaled
        fresh.show(record)
        assert hidden_texts(fig.figure) == hidden_texts(fresh.figure)


@pytest.mark.parametrize("figure", ["bucket timeline", "accumulation schedule", "replica drift"])
def test_a_move_on_the_kept_axes_draws_the_pixels_of_a_cleared_axes(records, cluster2, figure):
    """Between moves `FigurePanel` takes the last frame's artists off its axes instead of
    `ax.clear()` (which rebuilds every tick): each move must still give exactly the pixels
    of a cleared axes drawn again, in the same layout."""
    from dpviz.lessons.averaging.live import compare_averaging
    from dpviz.lessons.averaging.plots import plot_drift
    from dpviz.widgets.slider import FigurePanel

    caps, _, ks = records
    if figure == "bucket timeline":
        draw, values = (lambda ax, r: plot_bucket_timeline(r, ax=ax)), [caps[1.0], caps[0.25], caps[4.0], caps[1.0]]
    elif figure == "accumulation schedule":
        draw, values = (lambda ax, r: plot_schedule(r, ax=ax)), [ks[4], ks[1], ks[8], ks[4]]
    else:
        first = compare_averaging(cluster=cluster2, periods=(2,), steps=6)
        values = [first] + [compare_averaging(cluster=cluster2, periods=(h,), steps=6, gradient=first)
                            for h in (1, 4)]
        draw = lambda ax, r: plot_drift(r, ax)
    kept, cleared = FigurePanel(draw, (11, 3.8), caption=True), FigurePanel(draw, (11, 3.8), caption=True)
    kept.show(values[0])
    cleared.show(values[0])
    for value in values[1:]:
        kept.show(value)
        cleared.axes.clear()
        for title in titles(cleared.axes):
            title.set_visible(kept.caption is None)   # a re-run slider's titles are its caption
        cleared.axes.set_xlim(kept.limits[0])   # the limits the slider keeps
        cleared.axes.set_ylim(kept.limits[1])
        cleared.draw(cleared.axes, value)
        cleared.figure.canvas.draw()
        assert kept.png() == cleared.png()


@pytest.mark.parametrize("figure", ["bucket timeline", "accumulation schedule"])
def test_a_move_that_keeps_the_frame_draws_the_pixels_of_a_whole_draw(records, figure):
    """A move restores the kept frame (ticks, lane names, legend, stamp) and draws only the
    changing artists over it: the pixels must be those of the whole figure drawn again. Bars,
    bucket and micro-step labels and the title change from move to move here, so an artist
    left out of the changing ones (or a frame change not redrawn) shows as a difference."""
    from dpviz.widgets.slider import FigurePanel

    caps, _, ks = records
    if figure == "bucket timeline":
        draw, values = (lambda ax, r: plot_bucket_timeline(r, ax=ax)), \
            [caps[1.0], caps[0.25], caps[4.0], caps[ONE_BUCKET_CAP_MB]]
    else:
        draw, values = (lambda ax, r: plot_schedule(r, ax=ax)), [ks[4], ks[1], ks[8], ks[2]]
    fig = FigurePanel(draw, (11, 3.8), caption=True)
    reused = []
    for value in values * 2:
        fig.show(value)
        reused.append(fig.reused_frame)
        moved = fig.png()
        fig.figure.canvas.draw()
        assert moved == fig.png()
    # once the limits hold every value the frame is kept: not on every move, since a live
    # run's labels can land on the legend or lane names (`touches`: that move draws whole),
    # which load makes more likely; but a kept frame that is never restored is a bug
    assert any(reused[len(values):]), reused


def test_a_rerun_figure_shows_its_titles_as_a_caption_not_as_pixels(records):
    """A re-run slider's title holds the run's numbers: it is shown as HTML above the image,
    every line of it, and left out of the pixels and the layout (the stamp sits lower)."""
    import html

    from dpviz.plots.style import tags_of
    from dpviz.widgets.slider import FigurePanel

    draw = lambda ax, r: plot_bucket_timeline(r, ax=ax)
    titled, captioned = FigurePanel(draw, (11, 3.8)), FigurePanel(draw, (11, 3.8), caption=True)
    for record in (records[0][1.0], records[0][0.25]):
        titled.show(record)
        captioned.show(record)
        lines = titled.axes.get_title(loc="left").splitlines()
        assert len(lines) == 2 and "exposed communication" in lines[0] and "live run" in lines[1]
        assert captioned.caption.value.count("<br>") == 1
        assert all(html.escape(line) in captioned.caption.value for line in lines)
        assert captioned.axes.get_title(loc="left") == titled.axes.get_title(loc="left")
        assert not titles(captioned.axes)[0].get_visible()
        assert tags_of(captioned.axes) == tags_of(titled.axes)   # the figure still says live
        assert tags_of(captioned.axes)[0].startswith("live")
    stamp = lambda f: next(t for t in f.axes.texts if t.get_gid() == "dpviz-source")
    assert stamp(captioned).xyann[1] < stamp(titled).xyann[1]   # no room kept for a hidden title
    assert captioned.axes.get_position().y1 > titled.axes.get_position().y1


def test_kept_limits_grow_to_fit_a_longer_step(records):
    """Moves compare on one time scale: a longer step widens the kept x-limits to hold its
    data (with autoscale's margin and more)."""
    from dpviz.widgets.slider import FigurePanel

    draw = lambda ax, r: plot_schedule(r, ax=ax)

    def own_limits(record):
        alone = FigurePanel(draw, (11, 3.8))
        alone.show(record)
        return alone.limits[0]

    by_end = sorted(records[2].values(), key=lambda r: own_limits(r)[1])   # live steps: any order
    short, long = by_end[0], by_end[-1]
    fig = FigurePanel(draw, (11, 3.8))
    fig.show(short)
    first = fig.limits
    fig.show(long)
    lo, hi = fig.limits[0]
    assert lo == first[0][0] <= fig.axes.dataLim.x0   # both steps start at 0: the left end stays
    assert hi >= own_limits(long)[1] > first[0][1]       # the right end grew past autoscale's


def test_kept_limits_hold_through_jitter_and_shrink_back_after_an_outlier():
    """A step a few percent longer grows the kept limits and a shorter one after it is drawn at
    them (one scale, the frame kept); one run far longer than the rest (a 409 ms step among
    ~100 ms ones) must not leave every later move squeezed into a corner of its axis: the next
    ordinary run brings the limits back to what it needs. (barh's bars stick to 0: only the
    right end has autoscale's 5 % margin.)"""
    from dpviz.widgets.slider import GROW_SPARE, SHRINK_BEYOND, FigurePanel

    fig = FigurePanel(lambda ax, end: ax.barh([0], [end]), (6, 2))   # one bar from 0 to `end` ms
    fig.show(100.0)
    own = fig.limits[0]
    fig.show(110.0)                                  # 10 % slower: past the margin, grows ...
    grown = fig.limits
    assert grown[0][1] > 110.0 > own[1]
    for end in (100.0, 70.0, 110.0):                 # ... and then holds: one scale, one frame
        fig.show(end)
        assert fig.limits == grown
    fig.show(409.0)
    assert fig.limits[0][1] >= 409.0
    fig.show(100.0)
    lo, hi = fig.limits[0]
    # back to autoscale's limits for a 100 ms bar (margins 5 % a side: 110 ms wide) plus at most
    # the spare a tenth of that span: far below the outlier, and the kept span within the ratio
    assert 100.0 <= hi <= own[1] + GROW_SPARE * (own[1] - own[0]) + 1e-9
    assert (hi - lo) <= SHRINK_BEYOND * (1 + 2 * GROW_SPARE) * 100.0


def test_a_frame_is_sent_as_the_pixels_drawn(records):
    """The PNG a widget shows decodes to the canvas' pixels (RGB when opaque: no alpha lost)."""
    import io

    import numpy as np
    from PIL import Image

    from dpviz.widgets.slider import FigurePanel

    fig = FigurePanel(lambda ax, r: plot_bucket_timeline(r, ax=ax), (11, 3.8))
    fig.show(records[0][0.25])
    decoded = np.asarray(Image.open(io.BytesIO(fig.widget.value)).convert("RGBA"))
    assert np.array_equal(decoded, np.asarray(fig.figure.canvas.buffer_rgba()))


def test_place_labels_moves_a_colliding_label_before_hiding_one():
    from dpviz.plots.legibility import place_labels

    fig, ax = plt.subplots()
    texts = [ax.text(0.5, 0.5, "b0"), ax.text(0.5, 0.5, "b1"), ax.text(0.5, 0.5, "b2")]
    hidden = place_labels(texts, "no room", shifts_pt=((0, 0), (0, 12)))
    assert hidden == [texts[2]] and texts[1].get_visible()   # b1 moved up, b2 had nowhere to go
    assert overlapping_texts(fig) == [] and hidden_texts(fig) == [("b2", "no room")]
    plt.close(fig)


def test_a_band_is_not_a_bar():
    """The sweep's 25-75th percentile band (fill_between) carries its bucket counts: not bars."""
    fig, ax = plt.subplots()
    ax.fill_between([0, 1, 2], [0, 0.2, 0], [1, 1.5, 1], alpha=0.3)
    ax.text(1, 1.2, "6 buckets", ha="center")
    assert texts_over_bars(fig) == []
    plt.close(fig)


def test_a_label_on_its_own_background_reads_over_a_bar():
    fig, ax = plt.subplots()
    ax.bar([0], [2.0])
    ax.text(0, 1.97, " 2(N−1)/N", va="bottom", bbox=dict(fc="white", ec="none"))   # across the top edge
    assert texts_over_bars(fig) == []
    ax.texts[0].set_bbox(None)
    assert [t for t, _ in texts_over_bars(fig)] == [" 2(N−1)/N"]
    plt.close(fig)


def test_the_source_stamp_reads_at_7_pt_on_a_figure_wider_than_the_column():
    from dpviz.plots import style

    fig, ax = plt.subplots(figsize=(13, 3))
    style.tag(ax, "live")
    assert small_texts(fig) == []
    plt.close(fig)


def test_readable_on_picks_the_text_colour_that_contrasts_more():
    from dpviz.plots.legibility import readable_on

    assert readable_on("#1A1A6E") == "white" and readable_on("#F2E394") == "#222222"


# --- issue 42 item 12: each kind the audit saw, drawn small, caught; its fix, passed ----------

def test_a_legend_over_bars_is_caught_and_one_beside_them_is_not():
    from dpviz.plots.legibility import legends_over_bars

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar([0, 1, 2], [10, 9, 8], label="backward")   # tall bars fill the upper left corner
    ax.legend(loc="upper left")
    assert [name for name, _ in legends_over_bars(fig)] == ["backward"]
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))   # beside the axes
    fig.set_layout_engine("constrained")
    assert legends_over_bars(fig) == []
    plt.close(fig)


def test_a_legend_across_the_axes_edge_is_caught():
    from dpviz.plots.legibility import legends_across_axes

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([0, 1], [0, 1], label="step + one forward")
    ax.legend(loc="upper left", bbox_to_anchor=(0.9, 1.0))   # a sample line crosses the spine
    assert legends_across_axes(fig) == ["step + one forward"]
    for anchor, loc in (((1.0, 1.0), "upper left"), ((0.02, 0.98), "upper left")):   # beside, inside
        ax.legend(loc=loc, bbox_to_anchor=anchor)
        assert legends_across_axes(fig) == []
    plt.close(fig)


def test_fractional_ticks_on_an_axis_of_whole_numbers_are_caught():
    from matplotlib.ticker import MaxNLocator

    from dpviz.plots.legibility import fractional_ticks

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([2, 4, 8], [3.0, 2.5, 2.2], marker="o")   # k = 2, 4, 8: the default locator puts 2.5 ...
    ax.set_xlim(1.5, 8.5)
    ax.set_xticks([2, 2.5, 8])
    assert fractional_ticks(fig) == [("axes: x", ["2.5"])]
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    assert fractional_ticks(fig) == []   # the y axis holds fractions: its fractional ticks are fine
    ax.set_xticks([2.5, 6.5], ["before", "after"])   # words at groups' middles: no numbers
    assert fractional_ticks(fig) == []
    plt.close(fig)


def test_overlapping_opaque_bars_of_one_lane_are_caught_and_stacked_or_touching_ones_not():
    from dpviz.plots.bars import hbars

    fig, ax = plt.subplots(figsize=(6, 2))
    hbars(ax, [(0, 10), (10, 5)], (0, 1), facecolors="C0")        # touching: reads
    hbars(ax, [(2, 4)], (0.3, 0.4), facecolors="C3")              # a thinner bar on top: its own lane
    hbars(ax, [(3, 2)], (0, 1), facecolors="C2")                  # drawn inside an earlier one: layering
    ax.set_xlim(0, 40)
    ax.set_ylim(-0.5, 3)
    ax.set_title("t", loc="left")
    assert overdrawn_bars(fig) == []
    hbars(ax, [(20, 8), (25, 8)], (2, 1), facecolors="C1")        # bucket 3 then bucket 2 over it
    assert overdrawn_bars(fig) == [("t", 1)]
    plt.close(fig)


def test_a_label_on_its_own_marker_is_caught_and_one_set_off_it_is_not():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 2], [50, 60], marker="o", markersize=8)
    ax.set_ylim(0, 105)
    ax.text(1, 50 + 2, "25", ha="center", va="bottom", fontsize=7)   # 2 data units up: ~4 px, inside the marker
    ax.annotate("5", (2, 60), xytext=(0, 6), textcoords="offset points", ha="center", va="bottom", fontsize=7)
    assert texts_over_markers(fig) == ["25"]
    plt.close(fig)


def test_a_timeline_draws_overlapping_all_reduces_of_one_thread_in_rows_of_their_own():
    """Two buckets' all-reduces of one thread that overlap in time (gloo's profile of an
    out-of-order start, or a model's replay) get a row each: neither hides the other's end."""
    from dpviz.core.record import RunRecord, Span
    from dpviz.plots.legibility import bar_extents
    from dpviz.plots.timeline import plot_timeline

    def span(kind, start, end, bucket=None, tid="main"):
        return Span(rank=0, tid=tid, name=kind, kind=kind, start_us=start, end_us=end, step=0,
                    bucket=bucket, op="all_reduce" if kind == "allreduce" else None)

    spans = (span("step", 0, 1000), span("backward", 0, 600),
             span("allreduce", 300, 700, bucket=1, tid="gloo"), span("allreduce", 500, 900, bucket=0, tid="gloo"),
             span("allreduce", 900, 950, bucket=2, tid="gloo"))   # after both: back in the first row
    record = RunRecord(config={}, world_size=1, spans=spans, buckets=(), micro_steps=(), losses={},
                       checks=(), ddp_logging={})
    ax = plot_timeline(record, step=0)
    assert overdrawn_bars(ax.figure) == []
    extents, _ = bar_extents(ax)
    rows = {(round(x0), round(y0)) for x0, y0, _, _ in extents}   # display px: each bar's corner
    assert len({y for _, y in rows}) == 3      # backward's lane, then the two all-reduce rows
    plt.close(ax.figure)


def test_a_label_far_from_the_bar_it_was_put_on_is_caught_and_one_beside_it_is_not():
    """Issue 42 item 12: 03's parameter names, stacked upwards to clear each other, ended far
    above their gradients, beside no bar or another's."""
    from matplotlib.transforms import offset_copy

    from dpviz.plots.legibility import FLOAT_HEIGHTS, floating_labels

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar([0, 1, 2], [4, 8, 2], width=0.9)
    ax.set_ylim(0, 30)
    near = offset_copy(ax.transData, fig=fig, y=3, units="points")
    ax.text(1, 8, "1.weight", transform=near, ha="center", va="bottom", fontsize=8)   # on its bar's top
    ax.text(1, 4, "in bar", ha="center", va="center", fontsize=8)                      # inside it
    ax.text(0.5, 20, "a note", fontsize=8)                                             # put on no bar
    ax.text(0.5, 0.9, "axes note", transform=ax.transAxes, fontsize=8)
    assert floating_labels(fig) == []
    # 12 pt up per try, as 03 stacked them: the fourth try is 51 pt (6.4 font heights) off its bar
    far = ax.text(2, 2, "2.bias", transform=offset_copy(ax.transData, fig=fig, y=3 + 4 * 12, units="points"),
                  ha="center", va="bottom", fontsize=8)
    aside = ax.text(0, 4, "0.weight", transform=offset_copy(ax.transData, fig=fig, x=-100, y=3, units="points"),
                    ha="right", va="bottom", fontsize=8)   # pushed sideways off its bar, beside none
    found = dict(floating_labels(fig))
    assert set(found) == {"2.bias", "0.weight"} and min(found.values()) > FLOAT_HEIGHTS
    assert found["2.bias"] == pytest.approx(51 / 8, abs=0.1)   # gap / font height, both in points
    far.remove()
    aside.remove()
    plt.close(fig)


def test_a_tag_or_legend_entry_naming_what_the_figure_does_not_draw_is_caught():
    """Issue 42 item 12: 15's timeline, with no micro-steps, was stamped "all-reduce ends capped
    at their micro-step"; a legend entry for a kind of bar the figure has none of misleads too."""
    from matplotlib.patches import Patch

    from dpviz.plots import style
    from dpviz.plots.legibility import names_not_drawn

    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.barh([0, 1], [5, 3], color=["#DD8452", "#8172B3"])
    ax.set_yticks([0, 1], ["rank 0 main thread", "rank 0 all-reduce"])
    ax.legend(handles=[Patch(color="#DD8452", label="backward"), Patch(color="#8172B3", label="bucket 0"),
                       Patch(color="#D62728", label="exposed comm"),   # nothing red is drawn
                       Patch(facecolor="white", edgecolor="grey", hatch="..", label="link transfer")],
              loc="upper left", bbox_to_anchor=(1, 1))
    style.tag(ax, "live", note="all-reduce ends capped at their micro-step")
    assert names_not_drawn(fig) == [("live · all-reduce ends capped at their micro-step", "micro-step"),
                                    ("exposed comm", "no mark of its colour")]
    ax.set_title("K = 2 micro-steps", loc="left")   # a figure that names its micro-steps
    ax.barh([2], [1], color="#D62728")
    assert names_not_drawn(fig) == []
    plt.close(fig)

"""BucketOverlap: one recorded DDP step of rank 0, replayed on its real clock.

Backward runs on the main thread; as its gradients become ready they fill DDP's buckets
(left); a full bucket fires: on a run over the emulated link its transfer (dotted, as in the
figures), then its all-reduce on the communication lane, beside the rest of backward where
there is any; after backward the optimizer waits for the last bucket. Every time, and every
caption, is from the record (`record.json` written by `dpviz run`): a one-bucket step is
told as one (`dpviz.lessons.buckets.records.bucket_story`).

    dpviz run --layers 8 --width 512 --bucket-cap-mb 1 --out run/
    dpviz animate buckets --record run/record.json --out buckets.mp4
"""
from __future__ import annotations

from manim import DOWN, LEFT, UP, FadeIn, Line, Rectangle, Text, ValueTracker, VGroup, linear

from dpviz.app.scene import FONT_SIZE, RecordScene, fit, link_box
from dpviz.core.record import RunRecord
from dpviz.lessons.buckets.records import (
    StepTimeline, bucket_story, cap_label, step_end_ms, step_timeline, story_summary,
)
from dpviz.plots import style

X0, X1 = -2.7, 6.6            # the timeline's left and right edge (scene units)
MAIN_Y, COMM_Y, LANE_H = 1.2, -0.6, 0.7
LANE_TOP, LANE_BOTTOM = MAIN_Y + LANE_H + 0.05, COMM_Y - 0.34   # what the curtain covers
BOX_TOP = 2.4                 # the first bucket's box
SECONDS_PER_MS = 0.12         # animation time per recorded ms (bounded below)


# --- pure numbers ---------------------------------------------------------------------------

def fill_fraction(tl: StepTimeline, k: int, t_ms: float) -> float:
    """How full bucket k looks at t: it fills from the previous bucket's ready time (or
    backward's start) to its own ready time, when its last gradient arrives."""
    start = tl.buckets[k - 1].ready_ms if k else min(s for s, _ in tl.backward)
    end = tl.buckets[k].ready_ms
    if end <= start:
        return 1.0 if t_ms >= end else 0.0
    return min(1.0, max(0.0, (t_ms - start) / (end - start)))


def cap_text(cap: float | None) -> str:
    label = cap_label(cap)
    return "a cap that holds every gradient" if label == "one bucket" else f"bucket_cap_mb={label}"


class BucketOverlap(RecordScene):
    RECORD_TYPE = RunRecord
    # what `dpviz animate all` runs live (called with out=FOLDER) and the file it draws
    RECORDED_BY = ("dpviz.engine.ddp_run:run", {"world_size": 2, "steps": 3, "layers": 24, "width": 256,
                                         "batch_per_rank": 128, "bucket_cap_mb": 1.0})
    RECORD_FILE = "record.json"

    def construct(self):
        self.tl = step_timeline(self.record, rank=0)
        self.end_ms = step_end_ms(self.tl)
        self.clock = ValueTracker(0.0)   # the recorded time shown, in ms
        self.add(self.title(), self.lanes(), *self.step_bars(), self.curtain(), self.cursor(),
                 *self.bucket_column())
        self.shown_caption = self.caption("")
        self.play_step()
        self.show_summary()

    # --- the picture: drawn once, revealed by the clock ---------------------------------------

    def x_of(self, ms: float) -> float:
        return X0 + (X1 - X0) * ms / self.end_ms

    def title(self) -> Text:
        n = len(self.tl.buckets)
        return Text(f"DDP step {self.tl.step}, rank 0: {n} bucket{'s' * (n > 1)} "
                    f"({cap_text(self.record.config['bucket_cap_mb'])})",
                    font_size=FONT_SIZE, color=style.TEXT).to_edge(UP)

    def lanes(self) -> VGroup:
        """Lane labels and the time axis."""
        return VGroup(
            Text("main thread", font_size=16, color=style.TEXT).move_to([X0 - 0.9, MAIN_Y + LANE_H / 2, 0]),
            Text("all-reduce", font_size=16, color=style.TEXT).move_to([X0 - 0.9, COMM_Y + LANE_H / 2, 0]),
            Text("exposed", font_size=14, color="#D62728").move_to([X0 - 0.9, COMM_Y - 0.22, 0]),
            Text("buckets", font_size=16, color=style.TEXT).move_to([-5.7, 2.95, 0]),
            Line([X0, COMM_Y - 0.35, 0], [X1, COMM_Y - 0.35, 0], color=style.MUTED, stroke_width=1),
            Text("0 ms", font_size=14, color=style.MUTED).move_to([X0, COMM_Y - 0.6, 0]),
            Text(f"{self.end_ms:.0f} ms", font_size=14, color=style.MUTED).move_to([X1, COMM_Y - 0.6, 0]))

    def bars(self, intervals, y: float, color: str, h: float = LANE_H) -> list[Rectangle]:
        out = []
        for s, e in intervals:
            if e - s <= 0:
                continue
            r = Rectangle(width=max(0.01, self.x_of(e) - self.x_of(s)), height=h, stroke_width=0,
                          fill_color=color, fill_opacity=0.9)
            out.append(r.move_to([(self.x_of(s) + self.x_of(e)) / 2, y + h / 2, 0]))
        return out

    def step_bars(self) -> list[Rectangle]:
        """The whole step at once: compute on the main lane, each bucket's all-reduce on the
        communication lane, what was exposed below it."""
        tl = self.tl
        drawn = self.bars(tl.forward, MAIN_Y, style.kind_color("forward"))
        drawn += self.bars(tl.backward, MAIN_Y, style.kind_color("backward"))
        drawn += self.bars(tl.optimizer, MAIN_Y, style.kind_color("optimizer"))
        if tl.wait_ms > 0:  # backward done, the main thread waits on the last buckets
            drawn += self.bars([(tl.backward_end_ms, tl.comm_end_ms)], MAIN_Y + 0.25, style.MUTED, h=0.2)
        for b in tl.buckets:
            if b.link_start_ms is not None:   # the emulated wire: waiting, no CPU (dotted, as in the figures)
                drawn += self.link_bars([(b.link_start_ms, b.link_end_ms)], COMM_Y, style.bucket_color(b.index))
            drawn += self.bars([(b.start_ms, b.end_ms)], COMM_Y, style.bucket_color(b.index))
        return drawn + self.bars(tl.exposed, COMM_Y - 0.3, "#D62728", h=0.15)

    def link_bars(self, intervals, y: float, color: str, h: float = LANE_H) -> list:
        return [link_box(self.x_of(s), self.x_of(e), y + h / 2, h * 0.8, color) for s, e in intervals if e > s]

    def curtain(self) -> Rectangle:
        """A rectangle in the background colour hides what has not happened yet and slides
        right with the clock (cheap: nothing is rebuilt per frame)."""
        top, bottom = LANE_TOP, LANE_BOTTOM
        curtain = Rectangle(width=X1 - X0 + 0.2, height=top - bottom, stroke_width=0,
                            fill_color=style.BACKGROUND, fill_opacity=1.0)

        def slide(mob):
            left = self.x_of(self.clock.get_value())
            mob.stretch_to_fit_width(max(0.001, X1 + 0.1 - left))
            mob.move_to([(left + X1 + 0.1) / 2, (top + bottom) / 2, 0])

        return curtain.add_updater(slide)

    def cursor(self) -> Line:
        cursor = Line([X0, LANE_BOTTOM, 0], [X0, LANE_TOP, 0], color=style.TEXT, stroke_width=1.5)
        return cursor.add_updater(lambda mob: mob.move_to([self.x_of(self.clock.get_value()),
                                                           (LANE_TOP + LANE_BOTTOM) / 2, 0]))

    # --- the bucket column: each bucket fills as its gradients become ready -------------------

    def bucket_column(self) -> list:
        n = len(self.tl.buckets)
        self.box_h = min(0.5, 4.6 / n - 0.08)
        outlines = [self.outline(k) for k in range(n)]
        fills = [self.fill(k, box) for k, box in enumerate(outlines)]
        return [*fills, VGroup(*outlines, *[self.label(k, box) for k, box in enumerate(outlines)])]

    def outline(self, k: int) -> Rectangle:
        y = BOX_TOP - k * (self.box_h + 0.08)
        return Rectangle(width=1.6, height=self.box_h, color=style.bucket_color(self.tl.buckets[k].index),
                         stroke_width=2).move_to([-5.7, y, 0])

    def label(self, k: int, box: Rectangle) -> Text:  # Text is slow to build: once per bucket
        b = self.tl.buckets[k]
        text = f"b{b.index} {b.bytes / 2**20:.2f} MiB" if self.box_h > 0.2 else f"b{b.index}"
        return Text(text, font_size=min(14, int(40 * self.box_h)), color=style.TEXT).move_to(box)

    def fill(self, k: int, box: Rectangle) -> Rectangle:
        fill = Rectangle(width=1.6, height=self.box_h, stroke_width=0,
                         fill_color=style.bucket_color(self.tl.buckets[k].index), fill_opacity=0.8)

        def grow(mob):
            mob.stretch_to_fit_width(max(0.001, 1.6 * fill_fraction(self.tl, k, self.clock.get_value())))
            mob.align_to(box, LEFT).align_to(box, UP)

        return fill.add_updater(grow)

    # --- the story: the clock runs from section to section ------------------------------------

    def advance(self, to_ms: float, text: str, name: str) -> None:
        self.next_section(name)
        new = self.caption(text, size=20)
        self.remove(self.shown_caption)
        self.add(new)
        self.shown_caption = new
        to_ms = max(to_ms, self.clock.get_value())  # sections may coincide in time: never run backwards
        run_time = max(1.0, SECONDS_PER_MS * (to_ms - self.clock.get_value()))
        self.play(self.clock.animate.set_value(to_ms), run_time=min(run_time, 6.0), rate_func=linear)

    def play_step(self) -> None:
        for beat in bucket_story(self.tl):   # captions built from this step, one bucket or many
            self.advance(beat.to_ms, beat.caption, beat.name)

    def show_summary(self) -> None:
        """What was left exposed."""
        self.next_section("summary")
        summary = fit(Text(story_summary(self.tl), font_size=18, color=style.TEXT)).next_to(self.shown_caption, UP)
        self.play(FadeIn(summary, shift=0.2 * DOWN), run_time=0.8)
        self.wait(1.5)

"""BucketOverlap: one recorded DDP step of rank 0, replayed on its real clock.

Backward runs on the main thread; as its gradients become ready they fill DDP's buckets
(left); a full bucket fires its all-reduce on the communication lane, beside the rest of
backward; after backward the optimizer waits for the last bucket. Every time is from the
record (`record.json` written by `dpviz run`).

    dpviz run --layers 8 --width 512 --bucket-cap-mb 1 --out run/
    dpviz animate buckets --record run/record.json --out buckets.mp4
"""
from __future__ import annotations

from common import FONT_SIZE, RecordScene
from manim import DOWN, LEFT, UP, FadeIn, Line, Rectangle, Text, ValueTracker, VGroup, linear

from dpviz.buckets_records import StepTimeline, step_timeline
from dpviz.plots import style
from dpviz.record import RunRecord

X0, X1 = -2.7, 6.6            # the timeline's left and right edge (scene units)
MAIN_Y, COMM_Y, LANE_H = 1.2, -0.6, 0.7
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


def step_end_ms(tl: StepTimeline) -> float:
    return max([e for _, e in tl.optimizer] + [tl.comm_end_ms])


class BucketOverlap(RecordScene):
    RECORD_TYPE = RunRecord

    def construct(self):
        tl = step_timeline(self.record, rank=0)
        end = step_end_ms(tl)
        x_of = lambda ms: X0 + (X1 - X0) * ms / end

        # Set up: title, lane labels, time axis, the bucket column
        n = len(tl.buckets)
        title = Text(f"DDP step {tl.step}, rank 0: {n} bucket{'s' * (n > 1)} "
                     f"(bucket_cap_mb={self.record.config['bucket_cap_mb']})",
                     font_size=FONT_SIZE, color=style.TEXT).to_edge(UP)
        lanes = VGroup(
            Text("main thread", font_size=16, color=style.TEXT).move_to([X0 - 0.9, MAIN_Y + LANE_H / 2, 0]),
            Text("all-reduce", font_size=16, color=style.TEXT).move_to([X0 - 0.9, COMM_Y + LANE_H / 2, 0]),
            Text("exposed", font_size=14, color="#D62728").move_to([X0 - 0.9, COMM_Y - 0.22, 0]),
            Text("buckets", font_size=16, color=style.TEXT).move_to([-5.7, 2.95, 0]),
            Line([X0, COMM_Y - 0.35, 0], [X1, COMM_Y - 0.35, 0], color=style.MUTED, stroke_width=1),
            Text("0 ms", font_size=14, color=style.MUTED).move_to([X0, COMM_Y - 0.6, 0]),
            Text(f"{end:.0f} ms", font_size=14, color=style.MUTED).move_to([X1, COMM_Y - 0.6, 0]))
        box_h = min(0.5, 4.6 / n - 0.08)
        box_top = 2.4

        def outline(k: int) -> Rectangle:
            y = box_top - k * (box_h + 0.08)
            return Rectangle(width=1.6, height=box_h, color=style.bucket_color(tl.buckets[k].index),
                             stroke_width=2).move_to([-5.7, y, 0])

        def label(k: int) -> Text:  # Text is slow to build: once per bucket, not per frame
            b = tl.buckets[k]
            text = f"b{b.index} {b.bytes / 2**20:.2f} MiB" if box_h > 0.2 else f"b{b.index}"
            return Text(text, font_size=min(14, int(40 * box_h)), color=style.TEXT).move_to(outline(k))

        def bars(intervals, y: float, color: str, h: float = LANE_H) -> list[Rectangle]:
            out = []
            for s, e in intervals:
                if e - s <= 0:
                    continue
                r = Rectangle(width=max(0.01, x_of(e) - x_of(s)), height=h, stroke_width=0,
                              fill_color=color, fill_opacity=0.9)
                out.append(r.move_to([(x_of(s) + x_of(e)) / 2, y + h / 2, 0]))
            return out

        # The whole step is drawn once; a curtain in the background colour hides what has
        # not happened yet and slides right with the clock (cheap: nothing is rebuilt per frame).
        drawn = bars(tl.forward, MAIN_Y, style.kind_color("forward"))
        drawn += bars(tl.backward, MAIN_Y, style.kind_color("backward"))
        drawn += bars(tl.optimizer, MAIN_Y, style.kind_color("optimizer"))
        if tl.wait_ms > 0:  # backward done, the main thread waits on the last buckets
            drawn += bars([(tl.backward_end_ms, tl.comm_end_ms)], MAIN_Y + 0.25, style.MUTED, h=0.2)
        for b in tl.buckets:
            drawn += bars([(b.start_ms, b.end_ms)], COMM_Y, style.bucket_color(b.index))
        drawn += bars(tl.exposed, COMM_Y - 0.3, "#D62728", h=0.15)

        t = ValueTracker(0.0)
        lane_top, lane_bottom = MAIN_Y + LANE_H + 0.05, COMM_Y - 0.34
        curtain = Rectangle(width=X1 - X0 + 0.2, height=lane_top - lane_bottom, stroke_width=0,
                            fill_color=style.BACKGROUND, fill_opacity=1.0)

        def slide(mob):
            left = x_of(t.get_value())
            mob.stretch_to_fit_width(max(0.001, X1 + 0.1 - left))
            mob.move_to([(left + X1 + 0.1) / 2, (lane_top + lane_bottom) / 2, 0])

        curtain.add_updater(slide)
        cursor = Line([X0, lane_bottom, 0], [X0, lane_top, 0], color=style.TEXT, stroke_width=1.5)
        cursor.add_updater(lambda mob: mob.move_to([x_of(t.get_value()), (lane_top + lane_bottom) / 2, 0]))
        outlines = [outline(k) for k in range(n)]
        fills = []
        for k, b in enumerate(tl.buckets):
            fill = Rectangle(width=1.6, height=box_h, stroke_width=0,
                             fill_color=style.bucket_color(b.index), fill_opacity=0.8)

            def grow(mob, k=k):
                box = outlines[k]
                mob.stretch_to_fit_width(max(0.001, 1.6 * fill_fraction(tl, k, t.get_value())))
                mob.align_to(box, LEFT).align_to(box, UP)

            fill.add_updater(grow)
            fills.append(fill)
        boxes = VGroup(*outlines, *[label(k) for k in range(n)])
        self.add(title, lanes, *drawn, curtain, cursor, *fills, boxes)
        caption = self.caption("")

        def advance(to_ms: float, text: str, name: str) -> None:
            nonlocal caption
            self.next_section(name)
            new = self.caption(text, size=20)
            self.remove(caption)
            self.add(new)
            caption = new
            to_ms = max(to_ms, t.get_value())  # sections may coincide in time: never run backwards
            run_time = max(1.0, SECONDS_PER_MS * (to_ms - t.get_value()))
            self.play(t.animate.set_value(to_ms), run_time=min(run_time, 6.0), rate_func=linear)

        # 1) forward: nothing to communicate yet
        advance(min(s for s, _ in tl.backward), "forward: activations are kept for backward", "forward")
        # 2) backward: the last layers' gradients are ready first and fill bucket 0 first
        advance(tl.buckets[-1].ready_ms, "backward: a bucket fires its all-reduce once its last "
                "gradient is ready", "buckets fire")
        # 3) the all-reduces run beside the rest of backward
        advance(tl.backward_end_ms, "all-reduce of early buckets runs beside the remaining backward",
                "overlap")
        # 4) the optimizer needs every bucket reduced
        advance(end, f"the optimizer waits {tl.wait_ms:.1f} ms for the last bucket, then updates",
                "optimizer waits")
        # 5) what was left exposed
        exposed = sum(e - s for s, e in tl.exposed)
        comm = sum(b.comm_ms for b in tl.buckets)
        self.next_section("summary")
        summary = Text(f"all-reduce {comm:.1f} ms in total; exposed (nothing computing beside it) "
                       f"{exposed:.1f} ms", font_size=18, color=style.TEXT).next_to(caption, UP)
        self.play(FadeIn(summary, shift=0.2 * DOWN), run_time=0.8)
        self.wait(1.5)

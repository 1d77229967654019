"""AccumulationSchedule: one optimizer step of K micro-steps, drawn from a live run's record.

Each micro-step is a block per rank (forward, then backward) at its measured time; the
all-reduces appear where the trace recorded them, coloured by bucket. With no_sync placed
right they come only after the last micro-step's backward starts; a record of a pitfall
run (`no_sync="backward_only"` or `"off"`) shows them in every micro-step instead.

    dpviz animate accumulation --record DIR/record.json --out accumulation.mp4
"""
from __future__ import annotations

from common import FONT_SIZE, RecordScene
from manim import DOWN, RIGHT, UP, FadeIn, Rectangle, Text, VGroup

from dpviz.plots import style
from dpviz.record import RunRecord
from dpviz.overlap import steady_steps

MAX_RANKS = 4          # rows that fit the frame
WIDTH = 11.0           # scene units for the step's duration
X0 = -5.0              # where the step starts on screen
LANE = 0.42            # height of a compute or all-reduce bar


def extent(spans) -> tuple[float, float] | None:
    """(first start, last end) in µs of some spans, or None when there are none."""
    return (min(s.start_us for s in spans), max(s.end_us for s in spans)) if spans else None


def step_window(record: RunRecord, step: int) -> tuple[float, float]:
    """Everything that starts in the step, on the common clock, over every rank (µs).

    Not just the step span: a gloo worker thread may close its last all-reduce event
    after the main thread has moved on."""
    return extent(record.spans_of(step=step))


def inside(spans, window: tuple[float, float]):
    """The spans that start within a [start, end) window."""
    return [s for s in spans if window[0] <= s.start_us < window[1]]


class AccumulationSchedule(RecordScene):
    RECORD_TYPE = RunRecord

    def construct(self):
        record = self.record
        step = steady_steps(record)[-1]
        t0, t1 = step_window(record, step)
        x = lambda us: X0 + WIDTH * (us - t0) / (t1 - t0)
        ranks = list(range(min(record.world_size, MAX_RANKS)))
        row_y = {r: 1.8 - 1.3 * i for i, r in enumerate(ranks)}
        counts = {m.micro_step: m.all_reduces for m in record.micro_steps if m.step == step}
        cfg = record.config

        def bar(start_us, end_us, y, color, height=LANE, opacity=1.0):
            width = max(0.03, x(end_us) - x(start_us))
            return Rectangle(width=width, height=height, fill_color=color, fill_opacity=opacity,
                             stroke_width=0).move_to([x(start_us) + width / 2, y, 0])

        # Set up: title, rank labels, an all-reduce counter
        self.next_section("setup")
        title = Text(f"Gradient accumulation: K = {cfg['accum_steps']} micro-steps on "
                     f"{record.world_size} ranks (no_sync {cfg['no_sync']})",
                     font_size=FONT_SIZE, color=style.TEXT).to_edge(UP)
        labels = VGroup(*[Text(f"rank {r}", font_size=20, color=style.rank_color(r))
                          .move_to([X0 - 1.0, row_y[r] - LANE / 2, 0]) for r in ranks])
        self.add(title, labels, self._legend(row_y[ranks[-1]] - 1.3))
        total = 0
        counter = self._counter(total)
        self.add(counter)

        # One section per micro-step: its blocks on every rank, then its all-reduces
        for micro in sorted(counts):
            self.next_section(f"micro-step {micro}")
            blocks, reduces = VGroup(), VGroup()
            for r in ranks:
                window = [s for s in record.spans_of(r, "micro_step", step)
                          if s.name.endswith(f"#{micro}")][0]
                span = (window.start_us, window.end_us)
                y = row_y[r]
                blocks.add(bar(*span, y - LANE / 2, style.MUTED, height=2 * LANE + 0.2, opacity=0.15))
                if r == ranks[0]:
                    blocks.add(Text(f"micro {micro}", font_size=16, color=style.TEXT)
                               .next_to(blocks[-1], UP, buff=0.08))
                for kind in ("forward", "backward"):
                    found = extent(inside(record.spans_of(r, kind, step), span))
                    if found:
                        blocks.add(bar(*found, y, style.kind_color(kind)))
                for s in inside(record.spans_of(r, "allreduce", step), span):
                    reduces.add(bar(s.start_us, s.end_us, y - LANE - 0.05, style.bucket_color(s.bucket),
                                    height=LANE * 0.8))
            n = counts[micro]
            note = (f"micro-step {micro}: forward + backward, gradients add up locally, no all-reduce"
                    if n == 0 else f"micro-step {micro}: {n} all-reduce{'s' * (n != 1)}, one per bucket")
            caption = self.caption(note)
            self.play(FadeIn(blocks), FadeIn(caption), run_time=0.6)
            if n:
                total += n
                new_counter = self._counter(total)
                self.play(FadeIn(reduces), FadeIn(new_counter), run_time=0.6)
                self.remove(counter)
                counter = new_counter
            self.wait(0.3)
            self.remove(caption)

        # The optimizer steps once, after the last micro-step's all-reduces
        self.next_section("optimizer")
        steps = VGroup(*[bar(s.start_us, s.end_us, row_y[r], style.kind_color("optimizer"))
                         for r in ranks for s in record.spans_of(r, "optimizer", step)])
        samples = cfg["batch_per_rank"] * cfg["accum_steps"] * record.world_size
        self.play(FadeIn(steps), FadeIn(self.caption(f"one optimizer step for {samples} samples "
                                                     f"= micro-batch × K × ranks")), run_time=0.6)
        self.wait(0.8)

    def _legend(self, y: float) -> VGroup:
        """Colour keys: compute kinds, and bucket colours for the all-reduces."""
        keys = VGroup()
        for name, color in (("forward", style.kind_color("forward")),
                            ("backward", style.kind_color("backward")),
                            ("all-reduce (colour = bucket)", style.bucket_color(0)),
                            ("optimizer", style.kind_color("optimizer"))):
            swatch = Rectangle(width=0.3, height=0.2, fill_color=color, fill_opacity=1, stroke_width=0)
            keys.add(VGroup(swatch, Text(name, font_size=16, color=style.TEXT).next_to(swatch, RIGHT, buff=0.1)))
        return keys.arrange(RIGHT, buff=0.4).move_to([0, y, 0])

    def _counter(self, total: int) -> Text:
        return Text(f"all-reduces this step: {total}", font_size=20,
                    color=style.kind_color("allreduce")).to_corner(UP + RIGHT).shift(DOWN * 0.6)

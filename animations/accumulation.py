"""AccumulationSchedule: one optimizer step of K micro-steps, drawn from a live run's record.

Each micro-step is a block per rank (forward, then backward) at its measured time; the
all-reduces appear where the trace recorded them, coloured by bucket. With no_sync placed
right they come only after the last micro-step's backward starts; a record of a pitfall
run (`no_sync="backward_only"` or `"off"`) shows them in every micro-step instead.

    dpviz animate accumulation --record DIR/record.json --out accumulation.mp4
"""
from __future__ import annotations

from manim import DOWN, RIGHT, UP, FadeIn, Rectangle, Text, VGroup

from dpviz.analysis.overlap import steady_steps
from dpviz.app.scene import FONT_SIZE, RecordScene, fit, link_box
from dpviz.core.record import RunRecord
from dpviz.plots import style

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
    # what `dpviz animate all` runs live (called with out=FOLDER) and the file it draws
    RECORDED_BY = ("dpviz.engine.ddp_run:run", {"world_size": 2, "steps": 2, "accum_steps": 4, "bucket_cap_mb": 0.25})
    RECORD_FILE = "record.json"

    def construct(self):
        record = self.record
        self.step = steady_steps(record)[-1]
        self.t0, self.t1 = step_window(record, self.step)
        self.ranks = list(range(min(record.world_size, MAX_RANKS)))
        self.row_y = {r: 1.8 - 1.3 * i for i, r in enumerate(self.ranks)}
        counts = {m.micro_step: m.all_reduces for m in record.micro_steps if m.step == self.step}
        self.set_up()
        self.total, self.counter = 0, self._counter(0)
        self.add(self.counter)
        for micro in sorted(counts):   # one section per micro-step: its blocks, then its all-reduces
            self.play_micro_step(micro, counts[micro])
        self.play_optimizer()

    def x(self, us: float) -> float:
        return X0 + WIDTH * (us - self.t0) / (self.t1 - self.t0)

    def bar(self, start_us, end_us, y, color, height=LANE, opacity=1.0) -> Rectangle:
        width = max(0.03, self.x(end_us) - self.x(start_us))
        return Rectangle(width=width, height=height, fill_color=color, fill_opacity=opacity,
                         stroke_width=0).move_to([self.x(start_us) + width / 2, y, 0])

    def set_up(self) -> None:
        """Title, rank labels, the colour keys."""
        self.next_section("setup")
        cfg = self.record.config
        title = fit(Text(f"Gradient accumulation: K = {cfg['accum_steps']} micro-steps on "
                         f"{self.record.world_size} ranks (no_sync {cfg['no_sync']})",
                         font_size=FONT_SIZE, color=style.TEXT)).to_edge(UP)
        labels = VGroup(*[Text(f"rank {r}", font_size=20, color=style.rank_color(r))
                          .move_to([X0 - 1.0, self.row_y[r] - LANE / 2, 0]) for r in self.ranks])
        self.add(title, labels, self._legend(self.row_y[self.ranks[-1]] - 1.3))

    def micro_step_bars(self, micro: int) -> tuple[VGroup, VGroup]:
        """Micro-step `micro` on every rank: its window, forward and backward; its all-reduces."""
        blocks, reduces = VGroup(), VGroup()
        for r in self.ranks:
            window = [s for s in self.record.spans_of(r, "micro_step", self.step)
                      if s.name.endswith(f"#{micro}")][0]
            span = (window.start_us, window.end_us)
            y = self.row_y[r]
            blocks.add(self.bar(*span, y - LANE / 2, style.MUTED, height=2 * LANE + 0.2, opacity=0.15))
            if r == self.ranks[0]:
                blocks.add(Text(f"micro {micro}", font_size=16, color=style.TEXT)
                           .next_to(blocks[-1], UP, buff=0.08))
            for kind in ("forward", "backward"):
                found = extent(inside(self.record.spans_of(r, kind, self.step), span))
                if found:
                    blocks.add(self.bar(*found, y, style.kind_color(kind)))
            for s in inside(self.record.spans_of(r, "link", self.step), span):   # the emulated wire
                reduces.add(link_box(self.x(s.start_us), self.x(s.end_us), y - LANE - 0.05,
                                     LANE * 0.8, style.bucket_color(s.bucket)))
            for s in inside(self.record.spans_of(r, "allreduce", self.step), span):
                reduces.add(self.bar(s.start_us, s.end_us, y - LANE - 0.05, style.bucket_color(s.bucket),
                                     height=LANE * 0.8))
        return blocks, reduces

    def play_micro_step(self, micro: int, n: int) -> None:
        self.next_section(f"micro-step {micro}")
        blocks, reduces = self.micro_step_bars(micro)
        note = (f"micro-step {micro}: forward + backward, gradients add up locally, no all-reduce"
                if n == 0 else f"micro-step {micro}: {n} all-reduce{'s' * (n != 1)}, one per bucket")
        caption = self.caption(note)
        self.play(FadeIn(blocks), FadeIn(caption), run_time=0.6)
        if n:
            self.total += n
            new_counter = self._counter(self.total)
            self.play(FadeIn(reduces), FadeIn(new_counter), run_time=0.6)
            self.remove(self.counter)
            self.counter = new_counter
        self.wait(0.3)
        self.remove(caption)

    def play_optimizer(self) -> None:
        """The optimizer steps once, after the last micro-step's all-reduces."""
        self.next_section("optimizer")
        steps = VGroup(*[self.bar(s.start_us, s.end_us, self.row_y[r], style.kind_color("optimizer"))
                         for r in self.ranks for s in self.record.spans_of(r, "optimizer", self.step)])
        cfg = self.record.config
        samples = cfg["batch_per_rank"] * cfg["accum_steps"] * self.record.world_size
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
        if self.record.spans_of(kind="link"):
            swatch = link_box(0, 0.3, 0, 0.2, style.bucket_color(0))
            keys.add(VGroup(swatch, Text("link transfer (emulated)", font_size=16, color=style.TEXT)
                            .next_to(swatch, RIGHT, buff=0.1)))
        return fit(keys.arrange(RIGHT, buff=0.4)).move_to([0, y, 0])

    def _counter(self, total: int) -> Text:
        return Text(f"all-reduces this step: {total}", font_size=20,
                    color=style.kind_color("allreduce")).to_corner(UP + RIGHT).shift(DOWN * 0.6)

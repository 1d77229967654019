"""FsdpInTime: one recorded FSDP2 step of rank 0, replayed on its real clock.

Every unit holds only its shard. Just before a unit computes, its shards fly in from every
rank (the all-gather, on the emulated link), the layer materialises, computes (forward,
then backward), and dissolves; in backward its gradient's shards fly back out (the
reduce-scatter). Where prefetch is on, the next unit's shards are already flying while the
current one computes. A bar on the right rises and falls with the parameter bytes the rank
holds (measured), against the model's peak and DDP's full replica. Every time and byte is
from the record (`fsdp.json`, written by `dpviz fsdp`).

    dpviz fsdp --ranks 2 --model gpt --link classroom --out runs/fsdp
    dpviz animate fsdp --record runs/fsdp/fsdp.json --out fsdp.mp4
"""
from __future__ import annotations

from manim import (DOWN, LEFT, RIGHT, UP, DashedLine, Dot, Rectangle, Text, ValueTracker, VGroup, always_redraw,
                   linear)

from dpviz.app.scene import FONT_SIZE, RecordScene
from dpviz.lessons.fsdp.records import (
    FsdpRecord, LOSS, ROOT, RankStep, describe_knobs, measured_peak, own_compute, record_peak_model,
)
from dpviz.plots import style

UNIT_Y, RANK_Y = 1.0, -2.1          # the units' row and the ranks' row
BAR_X, BAR_BOTTOM, BAR_H = 6.2, -2.6, 4.6
GATHERED, SHARD = "#2A9D8F", "#BFD3E6"
SECONDS_PER_PASS = 6.0              # a forward or a backward plays this long


# --- pure numbers (no manim) ----------------------------------------------------------------------

def held_at(step: RankStep, t_ms: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(parameter bytes, buffer bytes) per unit in the last sample at or before `t_ms`."""
    last = None
    for s in step.samples:
        if s.t_ms > t_ms:
            break
        last = s
    if last is None:
        zero = (0,) * len(step.samples[0].params) if step.samples else ()
        return zero, zero
    return last.params, last.buffers


def computing_at(segments: list[tuple[str, str, float, float]], t_ms: float) -> tuple[str, str] | None:
    """(unit, phase) of the compute segment running at `t_ms`, if any."""
    for unit, phase, a, b in segments:
        if a <= t_ms < b:
            return unit, phase
    return None


def in_flight(step: RankStep, t_ms: float) -> list[tuple[str, str, float]]:
    """(unit, op, fraction of the way) of every collective between the link taking it and gloo
    finishing it at `t_ms`."""
    out = []
    for t in step.transfers:
        if t.link_start_ms <= t_ms < t.done_ms:
            out.append((t.unit, t.op, (t_ms - t.link_start_ms) / max(1e-9, t.done_ms - t.link_start_ms)))
    return out


class FsdpInTime(RecordScene):
    RECORD_TYPE = FsdpRecord
    # what `dpviz animate all` runs live (called with out=FOLDER) and the file it draws
    RECORDED_BY = ("dpviz.lessons.fsdp.live:record_fsdp", {})
    RECORD_FILE = "fsdp.json"

    def construct(self):
        rec = self.record
        self.step = rec.rank_step(0)
        self.segments = own_compute(rec, self.step)
        self.clock = ValueTracker(self.step.start_ms)
        self.top = max(rec.full_bytes, measured_peak(self.step)) * 1.1
        self.add(self.title())
        self.boxes = self.unit_boxes()
        self.ranks = self.rank_boxes()
        self.add(*self.boxes, *self.ranks, *self.bar_scale())
        self.add(*[self.fill(i) for i in range(len(rec.units))], self.bar(), self.flying(), self.time_label())
        self.shown = None
        fwd, bwd = self.midpoint("forward"), self.midpoint("backward")
        self.run_pass(fwd, "forward: each unit is gathered just in time, computes, and is freed", "forward",
                      SECONDS_PER_PASS / 2)
        self.run_pass(self.step.forward_end_ms, self.prefetch_note("forward"), "forward, prefetch",
                      SECONDS_PER_PASS / 2)
        self.run_pass(bwd, "backward: gathered again, in reverse; gradients reduce-scattered to their shards",
                      "backward", SECONDS_PER_PASS / 2)
        self.run_pass(self.step.end_ms, self.prefetch_note("backward"), "backward, prefetch", SECONDS_PER_PASS / 2)
        self.summary()

    def midpoint(self, phase: str) -> float:
        """The middle of the middle unit's compute in `phase`: a still there shows one unit
        computing and, with prefetch, the next one's shards on their way."""
        segs = [(a, b) for u, p, a, b in self.segments if p == phase and u not in (ROOT, LOSS)]
        if not segs:
            return self.step.forward_end_ms if phase == "forward" else self.step.end_ms
        a, b = segs[len(segs) // 2]
        return (a + b) / 2

    def prefetch_note(self, phase: str) -> str:
        ahead = sum(t.prefetched for t in self.step.transfers if t.op == "all_gather" and t.phase == phase)
        if ahead:
            return f"prefetch: {ahead} {phase} all-gathers left while the unit before them computed"
        return f"no prefetch: every {phase} all-gather waits for its own unit's turn"

    # --- the picture ------------------------------------------------------------------------------

    def title(self) -> Text:
        rec = self.record
        name = rec.workload.name if rec.workload else "model"
        return Text(f"FSDP2, {name} on {rec.world_size} ranks (rank 0): {describe_knobs(rec.knobs)}",
                    font_size=FONT_SIZE - 4, color=style.TEXT).to_edge(UP)

    def unit_boxes(self) -> list[VGroup]:
        units = self.record.units
        width = min(1.4, 10.0 / len(units) - 0.15)
        out = []
        for i, u in enumerate(units):
            x = -5.6 + width / 2 + i * (width + 0.15)
            box = Rectangle(width=width, height=1.4, color=style.MUTED, stroke_width=2).move_to([x, UNIT_Y, 0])
            shard = Rectangle(width=width, height=1.4 / self.record.world_size, stroke_width=0,
                              fill_color=SHARD, fill_opacity=1).align_to(box, DOWN).align_to(box, LEFT)
            label = Text(u.name, font_size=14, color=style.TEXT).next_to(box, DOWN, buff=0.12)
            out.append(VGroup(shard, box, label))
        return out

    def rank_boxes(self) -> list[VGroup]:
        n = self.record.world_size
        out = []
        for r in range(n):
            x = -4.5 + r * min(2.4, 9.0 / max(1, n - 1)) if n > 1 else 0
            box = Rectangle(width=1.0, height=0.5, color=style.rank_color(r), fill_color=style.rank_color(r),
                            fill_opacity=0.25).move_to([x, RANK_Y, 0])
            out.append(VGroup(box, Text(f"rank {r}", font_size=14, color=style.TEXT).move_to(box)))
        return out

    def bar_scale(self) -> list:
        rec = self.record
        model = record_peak_model(rec)
        y = lambda b: BAR_BOTTOM + BAR_H * b / self.top
        full = DashedLine([BAR_X - 0.5, y(rec.full_bytes), 0], [BAR_X + 0.5, y(rec.full_bytes), 0],
                          color=style.MUTED, dash_length=0.05)
        peak = DashedLine([BAR_X - 0.5, y(model.peak_bytes), 0], [BAR_X + 0.5, y(model.peak_bytes), 0],
                          color=style.TEXT, dash_length=0.12)
        return [Rectangle(width=0.6, height=BAR_H, color=style.MUTED, stroke_width=1).move_to(
                    [BAR_X, BAR_BOTTOM + BAR_H / 2, 0]),
                full, Text(f"DDP, ZeRO-1 {rec.full_bytes / 2 ** 20:.2f} MiB", font_size=12, color=style.MUTED)
                .next_to(full, LEFT, buff=0.1),
                peak, Text(f"model peak {model.peak_bytes / 2 ** 20:.2f}", font_size=12, color=style.TEXT)
                .next_to(peak, LEFT, buff=0.1),
                Text("params held", font_size=14, color=style.TEXT).move_to([BAR_X, BAR_BOTTOM - 0.25, 0])]

    def fill(self, i: int):
        """Unit i's gathered parameters: faint while its shards arrive (the all-gather buffer),
        solid once materialised, in the compute colour while it computes."""
        box = self.boxes[i][1]
        name = self.record.units[i].name

        def draw():
            t = self.clock.get_value()
            params, buffers = held_at(self.step, t)
            running = computing_at(self.segments, t)
            color = style.kind_color(running[1]) if running and running[0] == name else GATHERED
            opacity = 0.85 if params[i] else 0.3 if buffers[i] else 0.0
            return Rectangle(width=box.width, height=box.height, stroke_width=0, fill_color=color,
                             fill_opacity=opacity).move_to(box)

        return always_redraw(draw)

    def bar(self):
        def draw():
            params, buffers = held_at(self.step, self.clock.get_value())
            held = self.step.shard_bytes + sum(params) + sum(buffers)
            h = max(0.001, BAR_H * held / self.top)
            shard_h = BAR_H * self.step.shard_bytes / self.top
            return VGroup(Rectangle(width=0.6, height=h, stroke_width=0, fill_color=GATHERED, fill_opacity=0.8)
                          .move_to([BAR_X, BAR_BOTTOM + h / 2, 0]),
                          Rectangle(width=0.6, height=shard_h, stroke_width=0, fill_color=SHARD, fill_opacity=1)
                          .move_to([BAR_X, BAR_BOTTOM + shard_h / 2, 0]))

        return always_redraw(draw)

    def flying(self):
        """One dot per rank per collective on the link: all-gather shards fly from the ranks to
        the unit, reduce-scatter shards from the unit back to the ranks."""
        index = {u.name: i for i, u in enumerate(self.record.units)}

        def draw():
            dots = VGroup()
            for unit, op, f in in_flight(self.step, self.clock.get_value()):
                target = self.boxes[index[unit]][1].get_center()
                for r, rank in enumerate(self.ranks):
                    a, b = (rank.get_center(), target) if op == "all_gather" else (target, rank.get_center())
                    dots.add(Dot(a + (b - a) * f, radius=0.07, color=style.op_color(op) if op == "reduce_scatter"
                                 else style.rank_color(r)))
            return dots

        return always_redraw(draw)

    def time_label(self):
        return always_redraw(lambda: Text(f"t = {self.clock.get_value() - self.step.start_ms:5.1f} ms",
                                          font_size=16, color=style.MUTED).to_corner(UP + RIGHT).shift(0.5 * DOWN))

    # --- the story ----------------------------------------------------------------------------------

    def show_caption(self, text: str) -> None:
        new = self.caption(text, size=18)
        if self.shown is not None:
            self.remove(self.shown)
        self.add(new)
        self.shown = new

    def run_pass(self, to_ms: float, text: str, name: str, seconds: float) -> None:
        self.next_section(name)
        self.show_caption(text)
        self.play(self.clock.animate.set_value(max(to_ms, self.clock.get_value())), run_time=seconds,
                  rate_func=linear)
        self.wait(0.4)   # hold the moment reached: the section's still shows it, not the frame before

    def summary(self) -> None:
        rec, step = self.record, self.step
        model = record_peak_model(rec)
        self.next_section("summary")
        waits = sum(w.end_ms - w.start_ms for w in step.waits)
        prefetched = sum(t.prefetched for t in step.transfers if t.op == "all_gather")
        self.show_caption(f"peak {measured_peak(step) / 2 ** 20:.2f} MiB measured, {model.peak_bytes / 2 ** 20:.2f} "
                          f"model, full replica {rec.full_bytes / 2 ** 20:.2f}; {prefetched} all-gathers prefetched, "
                          f"{waits:.0f} ms waited")
        self.wait(2)

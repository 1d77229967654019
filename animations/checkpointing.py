"""CheckpointMemory: one training step's memory, drawn from a measured `checkpointing` record.

Top: the MLP's blocks and, under each, the activation autograd keeps for backward.
Bottom: the allocator's bytes over the step (the recorded curve) drawing itself in time.
First without checkpointing (every activation stays until its backward), then with a
checkpoint every k blocks (only segment inputs stay; each segment is recomputed inside
backward, in the recompute colour, just before its gradients are computed).

    dpviz checkpointing --out runs/ckpt && dpviz animate checkpointing --record runs/ckpt/checkpointing.json --out ckpt.mp4
"""
from __future__ import annotations

from manim import (DOWN, LEFT, RIGHT, UP, AnimationGroup, Axes, Create, FadeIn, FadeOut,
                   LaggedStart, Rectangle, Square, Succession, Text, VGroup, VMobject, Write,
                   linear)

from dpviz.app.scene import FONT_SIZE, RecordScene
from dpviz.lessons.checkpointing.records import CheckpointingRecord, MemoryRow, segments
from dpviz.plots import style

MB = 2 ** 20
MAX_POINTS = 150       # curve vertices per drawn phase (the peak of each bucket is kept)
FORWARD_S, BACKWARD_S = 2.0, 3.0


# --- numeric helpers ----------------------------------------------------------------------

def window(row: MemoryRow, t0: float, t1: float) -> list[tuple[float, float]]:
    """(ms, MB) of the allocator curve over [t0, t1] as a step line, thinned to MAX_POINTS."""
    pts = row.curve
    start = max((p for p in pts if p.t_ms <= t0), key=lambda p: p.t_ms, default=pts[0])
    inside = [p for p in pts if t0 < p.t_ms <= t1]
    every = max(1, len(inside) // MAX_POINTS)
    kept = [max(inside[i:i + every], key=lambda p: p.bytes) for i in range(0, len(inside), every)]
    out, y = [(t0, start.bytes / MB)], start.bytes / MB
    for p in kept:
        out += [(p.t_ms, y), (p.t_ms, p.bytes / MB)]
        y = p.bytes / MB
    return out + [(t1, y)]


def chosen_k(record: CheckpointingRecord) -> int:
    """The measured k > 0 with the lowest measured peak (what the second act shows)."""
    rows = [r for r in record.rows if r.checkpoint_every]
    if not rows:
        raise ValueError("this memory record has no checkpointed row: measure with k > 0 too")
    return min(rows, key=lambda r: (r.peak_activation_bytes, r.checkpoint_every)).checkpoint_every


class CheckpointMemory(RecordScene):
    RECORD_TYPE = CheckpointingRecord
    # what `dpviz animate all` runs live (called with out=FOLDER) and the file it draws
    RECORDED_BY = ("dpviz.lessons.checkpointing.live:measure_checkpointing", {"checkpoint_every": (0, 2, 4, 8)})
    RECORD_FILE = "checkpointing.json"

    def construct(self):
        rec = self.record
        k = chosen_k(rec)
        rows = (rec.row(0), rec.row(k))
        n = rec.layers

        # Set up: title, the blocks, the axes shared by both acts
        title = Text(f"{n} blocks, batch {rec.batch}: what backward needs kept",
                     font_size=FONT_SIZE + 4, color=style.TEXT).to_edge(UP)
        size = min(0.6, 11.0 / n)
        blocks = VGroup(*[Square(size, color=style.MUTED) for _ in range(n)]).arrange(RIGHT, buff=size * 0.25)
        blocks.next_to(title, DOWN, buff=0.35)
        self.acts = [Rectangle(width=size * 0.8, height=size * 0.5, stroke_width=0,
                               fill_opacity=1).next_to(b, DOWN, buff=0.1) for b in blocks]
        xmax = max(r.step_ms for r in rows)
        ymax = max(max(p.bytes for p in r.curve) for r in rows) / MB * 1.1
        self.axes = Axes(x_range=[0, xmax, xmax / 4], y_range=[0, ymax, ymax / 4], x_length=10,
                         y_length=3.2, tips=False,
                         axis_config={"color": style.MUTED, "include_numbers": False}).to_edge(DOWN, buff=0.9)
        labels = VGroup(
            Text(f"{ymax:.0f} MB", font_size=16, color=style.TEXT).next_to(self.axes.c2p(0, ymax), LEFT),
            Text(f"{xmax:.0f} ms", font_size=16, color=style.TEXT).next_to(self.axes.c2p(xmax, 0), RIGHT))
        self.play(Write(title), Create(blocks), Create(self.axes), FadeIn(labels))

        self.next_section("no checkpointing")
        done = self.act_plain(rows[0])
        self.play(done.animate.set_color(style.MUTED))

        self.next_section(f"checkpoint every {k}")
        self.act_checkpointed(rows[1], k, n)

        self.next_section("summary")
        plain, ck = rows
        self.show_caption(f"peak {plain.peak_activation_bytes / MB:.1f} → {ck.peak_activation_bytes / MB:.1f} MB "
                          f"(model {ck.prediction.peak_bytes / MB:.1f}); recompute {ck.recompute_ms:.0f} ms, "
                          f"a forward is {plain.forward_ms:.0f} ms")
        self.wait(2)

    # --- the two acts ---------------------------------------------------------------------

    def curve(self, row: MemoryRow, t0: float, t1: float, color: str) -> VMobject:
        pts = [self.axes.c2p(t, y) for t, y in window(row, t0, t1)]
        return VMobject(color=color, stroke_width=3).set_points_as_corners(pts)

    def show_caption(self, text: str) -> None:
        new = self.caption(text, size=20)
        old = getattr(self, "_caption", None)
        self.play(FadeOut(old), FadeIn(new)) if old else self.play(FadeIn(new))
        self._caption = new

    def act_plain(self, row: MemoryRow) -> VGroup:
        """Forward keeps every activation; backward frees them last to first."""
        color = style.kind_color("forward")
        self.show_caption("no checkpointing: forward keeps every block's activation")
        fwd = self.curve(row, 0, row.forward_ms, color)
        for a in self.acts:
            a.set_fill(color)
        self.play(Create(fwd, rate_func=linear),
                  LaggedStart(*[FadeIn(a) for a in self.acts], lag_ratio=1), run_time=FORWARD_S)
        self.show_caption("backward uses them last to first, and frees each after use")
        bwd = self.curve(row, row.forward_ms, row.step_ms, color)
        self.play(Create(bwd, rate_func=linear),
                  LaggedStart(*[FadeOut(a) for a in reversed(self.acts)], lag_ratio=1), run_time=BACKWARD_S)
        return VGroup(fwd, bwd)

    def act_checkpointed(self, row: MemoryRow, k: int, n: int) -> None:
        """Forward drops all but segment inputs; backward recomputes each segment, then frees it."""
        fwd_color, re_color = style.kind_color("forward"), style.kind_color("recompute")
        segs = segments(n, k)
        if len(row.recompute_spans) != len(segs):
            raise ValueError(f"row k={k} has {len(row.recompute_spans)} recomputed forwards for "
                             f"{len(segs)} segments: not a record from dpviz.lessons.checkpointing.live.measure_checkpointing")
        self.show_caption(f"checkpoint every {k}: forward keeps only each segment's input")
        for a in self.acts:
            a.set_fill(fwd_color)
        per_block = row.forward_ms / n
        for seg in segs:
            inner = [self.acts[i] for i in seg if i != seg.start]
            steps = [LaggedStart(*[FadeIn(self.acts[i]) for i in seg], lag_ratio=1)]
            if inner:
                steps.append(AnimationGroup(*[FadeOut(a) for a in inner]))
            self.play(Create(self.curve(row, seg.start * per_block, seg.stop * per_block, fwd_color),
                             rate_func=linear),
                      Succession(*steps), run_time=FORWARD_S * len(seg) / n + 0.3)
        self.show_caption("backward re-runs each segment's forward, then frees it")
        t = row.forward_ms
        spans = sorted(row.recompute_spans)
        for seg, (_, r1) in zip(reversed(segs), spans):
            recomputed = [FadeIn(self.acts[i].copy().set_fill(re_color)) for i in seg if i != seg.start]
            self.play(Create(self.curve(row, t, r1, re_color), rate_func=linear),
                      *([LaggedStart(*recomputed, lag_ratio=1)] if recomputed else []), run_time=1.0)
            end = next((s for s, _ in spans if s > r1), row.step_ms)
            self.play(Create(self.curve(row, r1, end, fwd_color), rate_func=linear),
                      *[FadeOut(m) for m in self.mobjects_under(seg)], run_time=0.8)
            t = end

    def mobjects_under(self, seg) -> list:
        """Everything drawn in the activation slots of a segment (kept inputs and recomputed copies)."""
        slots = [self.acts[i].get_center() for i in seg]
        return [m for m in self.mobjects
                if isinstance(m, Rectangle) and any((abs(m.get_center() - c) < 1e-3).all() for c in slots)]

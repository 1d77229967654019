"""RingAllReduce: a recorded all-reduce (ring.json from `dpviz ring`), step by step.

One row per rank, one box per chunk showing the chunk's real recorded values. A box's
stripes are the colours of the ranks whose inputs it already sums. Each step is one
section: arrows for the messages, then the receivers' boxes change to the recorded values.

    dpviz ring --ranks 4 --elements 16 --out run/
    dpviz animate ring --record run/ring.json --out ring.mp4
"""
from __future__ import annotations

from manim import (LEFT, RIGHT, UP, Create, CurvedArrow, FadeIn, FadeOut, Rectangle,
                   Text, Transform, VGroup)

from dpviz.app.scene import FONT_SIZE, RecordScene
from dpviz.lessons.collectives.record import CollectiveRecord, describe_collective
from dpviz.lessons.collectives.schedule import holds_per_step
from dpviz.plots import style

PHASE_CAPTION = {
    "reduce_scatter": "reduce-scatter: send one chunk right, the receiver adds it",
    "all_gather": "all-gather: pass a finished chunk right, the receiver copies it",
    "reduce": "reduce: partial sums travel to the receivers, which add them",
    "broadcast": "broadcast: the finished sum is copied down",
}


# --- layout helpers (pure numbers) --------------------------------------------------------

def box_size(n_ranks: int, n_chunks: int) -> tuple[float, float]:
    """(width, height) of a chunk box so the grid fits the 14 × 8 frame with gaps for arrows."""
    return min(2.8, 10.5 / n_chunks - 0.45), min(0.9, 5.2 / n_ranks - 0.2)


def chunk_text(values) -> str:
    return " ".join(f"{v:g}" for v in values)


class ChunkGrid:
    """Where rank r's chunk c sits, and how a chunk is drawn: one row per rank, centred,
    with room for the rank labels on the left and the caption below."""

    def __init__(self, n_ranks: int, chunks: list[tuple[int, int]]):
        self.chunks = chunks
        self.width, self.height = box_size(n_ranks, len(chunks))
        self.left = -(len(chunks) * (self.width + 0.45) - 0.45) / 2 + 0.6
        self.top = (n_ranks * (self.height + 0.2) - 0.2) / 2 - self.height / 2 + 0.4

    def centre(self, rank: int, chunk: int):
        x = self.left + self.width / 2 + chunk * (self.width + 0.45)
        y = self.top - rank * (self.height + 0.2)
        return x * RIGHT + y * UP

    def box(self, rank: int, chunk: int, values, sources) -> VGroup:
        """A chunk: stripes in the colours of the ranks it sums, an outline, its values."""
        width, height, centre = self.width, self.height, self.centre(rank, chunk)
        stripe_w = width / len(sources)
        stripes = [Rectangle(width=stripe_w, height=height, stroke_width=0,
                             fill_color=style.rank_color(src), fill_opacity=0.5)
                   .move_to(centre + (-width / 2 + (k + 0.5) * stripe_w) * RIGHT)
                   for k, src in enumerate(sorted(sources))]
        outline = Rectangle(width=width, height=height, color=style.TEXT, stroke_width=1.5)
        label = Text(chunk_text(values), font_size=FONT_SIZE - 6, color=style.TEXT)
        label.scale_to_fit_width(min(label.width, width * 0.9))
        return VGroup(*stripes, outline.move_to(centre), label.move_to(centre))

    def chunks_of(self, flat) -> list:
        return [flat[a:b] for a, b in self.chunks]

    def arrow(self, transfer) -> CurvedArrow:
        """A message from the sender's chunk to the receiver's, on the right of the boxes."""
        t, right = transfer, self.width / 2 * RIGHT
        return CurvedArrow(self.centre(t.src, t.chunk) + right, self.centre(t.dst, t.chunk) + right,
                           angle=-1.2 if t.dst > t.src else 1.2 + 0.25 * (t.src - t.dst),
                           color=style.rank_color(t.src), stroke_width=3, tip_length=0.18)


class RingAllReduce(RecordScene):
    RECORD_TYPE = CollectiveRecord
    # what `dpviz animate all` runs live (called with out=FOLDER) and the file it draws
    RECORDED_BY = ("dpviz.lessons.collectives.execute:record_collective",
                   {"algorithm": "ring", "elements": 16, "world_size": 4})
    RECORD_FILE = "ring.json"

    def construct(self):
        record = self.record
        layout = ChunkGrid(record.world_size, record.chunks)
        holds = holds_per_step(record)
        grid, caption = self.show_inputs(layout, holds[0])
        for step, state in zip(record.steps, holds[1:]):
            self.play_step(layout, grid, caption, step, state)
        self.show_result(caption)

    def show_inputs(self, layout: ChunkGrid, held) -> tuple[list[list[VGroup]], Text]:
        """Set up: title, rank labels, each rank's own values; returns the boxes and caption."""
        record, n = self.record, self.record.world_size
        title = Text(f"{record.algorithm} all-reduce · {n} ranks · {record.elements} values "
                     f"(recorded on live gloo ranks)", font_size=FONT_SIZE, color=style.TEXT).to_edge(UP)
        labels = [Text(f"rank {r}", font_size=FONT_SIZE - 4, color=style.rank_color(r))
                  .next_to(layout.centre(r, 0) + layout.width / 2 * LEFT, LEFT) for r in range(n)]
        grid = [[layout.box(r, c, values, held[r][c])
                 for c, values in enumerate(layout.chunks_of(record.inputs[r]))] for r in range(n)]
        caption = self.caption("inputs: each rank holds only its own values")
        self.next_section("inputs")
        self.play(FadeIn(title), *map(FadeIn, labels), *(FadeIn(b) for row in grid for b in row), FadeIn(caption))
        return grid, caption

    def play_step(self, layout: ChunkGrid, grid, caption: Text, step, state) -> None:
        """One section: the step's messages fly, then the receivers show the recorded values."""
        self.next_section(f"step {step.index + 1} {step.phase}")
        new_caption = self.caption(f"step {step.index + 1}/{len(self.record.steps)} · {PHASE_CAPTION[step.phase]}")
        arrows = [layout.arrow(t) for t in step.transfers]
        self.play(Transform(caption, new_caption), *map(Create, arrows), run_time=0.7)
        changed = {(t.dst, t.chunk) for t in step.transfers}
        self.play(*(Transform(grid[r][c], layout.box(r, c, step.values[r][c], state[r][c]))
                    for r, c in sorted(changed)), run_time=0.7)
        self.play(*map(FadeOut, arrows), run_time=0.3)

    def show_result(self, caption: Text) -> None:
        self.next_section("result")
        verdict = describe_collective(self.record).splitlines()[-1]
        self.play(Transform(caption, self.caption(f"every rank holds the full sum · {verdict}")))
        self.wait(0.5)

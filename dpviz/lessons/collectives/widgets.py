"""Step through a recorded all-reduce: play/step slider, the chunk grid redrawn per step."""
from __future__ import annotations

from dpviz.lessons.collectives.plots import collective_frames, plot_collective_step
from dpviz.lessons.collectives.record import CollectiveRecord
from dpviz.widgets.slider import stepper


def collective_player(record: CollectiveRecord, interval_ms: int = 1200):
    """Frame 0 is the inputs, frame i the state after step i; stripes show whose inputs
    each element already sums."""
    frames = len(collective_frames(record))
    figsize = (2.5 + 0.5 * record.elements, 1.0 + 0.55 * record.world_size)
    return stepper(frames, lambda ax, i: plot_collective_step(record, i, ax), label="step",
                   figsize=figsize, interval_ms=interval_ms)

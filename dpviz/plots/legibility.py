"""Can every label be read? Text artists of a drawn figure whose boxes overlap.

Figures are drawn from live data, so where labels land changes with every run: a check on
the drawn figure (matplotlib's own text extents) catches collisions no fixed layout rule can.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.layout_engine import PlaceHolderLayoutEngine
from matplotlib.text import Text


def visible_texts(fig: Figure) -> list[Text]:
    """Every non-empty, visible text of the figure: titles, axis and tick labels, legends,
    annotations, texts placed in axes."""
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
            and t.figure is fig and t.get_alpha() != 0]


def overlapping_texts(fig: Figure, pad_px: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of labels whose rendered boxes overlap by more than `pad_px` pixels each way
    (touching edges are fine). Draws the figure once to measure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for text in visible_texts(fig):
        box = text.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            boxes.append((text.get_text(), box))
    out = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            dx = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            dy = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if dx > pad_px and dy > pad_px:
                out.append((a, b))
    return out


def hide_colliding(texts: list[Text]) -> list[Text]:
    """Hide every text that would overlap one kept before it (in the given order, so put
    the most important first); returns the hidden ones. Data decides where labels land:
    a label that cannot be read is better left out, its value is in the title or table."""
    if not texts:
        return []
    fig = texts[0].figure
    if isinstance(fig.get_layout_engine(), (type(None), PlaceHolderLayoutEngine)):
        for ax in fig.axes:   # the axes stay where they are: only the pending autoscaling
            ax.get_xlim(), ax.get_ylim()   # moves data-placed labels, and reading limits applies it
    else:   # lay the figure out first (constrained layout moves the axes); no pixels needed
        fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    kept, hidden = [], []
    for text in texts:
        box = text.get_window_extent(renderer)
        if any(box.overlaps(other) for other in kept):
            text.set_visible(False)
            hidden.append(text)
        else:
            kept.append(box)
    return hidden

"""Figures as files: PNG for the web, SVG and PDF (vector) for slides and papers."""
from __future__ import annotations

from pathlib import Path

FIGURE_FORMATS = ("png", "svg", "pdf")


def save_figure(fig, stem: str | Path, formats=FIGURE_FORMATS, dpi: int = 120) -> list[Path]:
    """Write `fig` as `stem.png`, `stem.svg`, `stem.pdf` (or the `formats` given); the paths."""
    unknown = set(formats) - set(FIGURE_FORMATS)
    if unknown:
        raise ValueError(f"unknown figure formats {sorted(unknown)}; choose from {', '.join(FIGURE_FORMATS)}")
    paths = [Path(f"{stem}.{fmt}") for fmt in formats]
    for path in paths:
        fig.savefig(path, dpi=dpi)
    return paths

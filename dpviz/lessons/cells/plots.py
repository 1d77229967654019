"""A recorded `%%ranks` cell on the shared per-rank timeline (`dpviz.plots.timeline`)."""
from __future__ import annotations

from dpviz.core.record import RunRecord
from dpviz.lessons.cells.records import CellRecord, collective_timings
from dpviz.plots.timeline import plot_timeline


def plot_cell(record: CellRecord, ax=None):
    """What the cell did on each rank, on one clock: compute above, collectives below
    (coloured by op); the title names the collectives and the longest wait in one."""
    if not record.spans:
        raise ValueError("nothing to draw: " + ("the cell ran no torch operation" if record.recorded
                                                else "it was not recorded (run it with %%ranks --record)"))
    ax = plot_timeline(as_run_record(record), step=0, ax=ax)
    ax.set_xlabel("time from the cell's first event (ms, common clock)")
    ax.set_title(_title(record), loc="left")
    return ax


def as_run_record(record: CellRecord) -> RunRecord:
    """The cell as the run record the shared timeline draws: its spans (each rank's whole
    cell is its step 0), no DDP buckets, steps or losses."""
    return RunRecord(config={"ranks": list(record.ranks)}, world_size=record.world_size,
                     spans=record.spans, buckets=(), micro_steps=(), losses={}, checks=(),
                     ddp_logging={})


def _title(record: CellRecord) -> str:
    rows = collective_timings(record)
    if not rows:
        return f"the cell on {len(record.ranks)} ranks: no collective"
    ops = ", ".join(dict.fromkeys(f"{t.op} {t.bytes} B" if t.bytes is not None else t.op for t in rows))
    wait = max((w, r, t.op) for t in rows for r, w in t.wait_ms.items())
    return (f"the cell on {len(record.ranks)} ranks: {len(rows)} collective(s) ({ops}); "
            f"longest wait: rank {wait[1]}, {wait[0]:.2f} ms in {wait[2]}")

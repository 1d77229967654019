"""load-trace's figures drawn by a child process that imports matplotlib while the parent
is still reading the traces.

On a small trace, importing matplotlib and drawing are most of `load-trace`'s wall time.
The child is forked at the start of the command and imports matplotlib beside the parent's
read; given the record, it forks once more per further figure, so the figures are drawn side
by side by processes that have matplotlib already. Forking is used only where it is safe
(Linux, and no thread besides the main one); elsewhere the figures are drawn in this process
by the same code. The record travels through a pipe, never through a file.
"""
from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import traceback
from pathlib import Path


def can_fork() -> bool:
    """Whether a child forked now is safe: Linux, and no thread besides this one (a thread
    holding a lock at the fork would leave the child's copy of it locked forever)."""
    return sys.platform == "linux" and len(os.listdir("/proc/self/task")) == 1


def import_plotting() -> None:
    """Everything drawing the figures imports: matplotlib's figure and its PNG canvas, not
    pyplot (the figures are made for files, `style.figures_for_files`)."""
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401

    from dpviz.plots import files, style, timeline  # noqa: F401
    from dpviz.lessons.traces import plots  # noqa: F401


def figures_to_draw(record, step: int) -> tuple[list[str], str | None]:
    """The figures of `step` (timeline, and the all-reduce sizes where sizes are recorded),
    and why the sizes figure is left out, if it is."""
    from dpviz.analysis.scan import COMM_KINDS
    from dpviz.lessons.traces.plots import allreduce_sizes, sizes_unknown

    if not any(s.kind in COMM_KINDS for s in record.spans_of(step=step)):
        return ["timeline"], None
    unknown = sizes_unknown(allreduce_sizes(record, step=step))
    return (["timeline"], f"no allreduce-sizes figure: {unknown}") if unknown else \
        (["timeline", "allreduce-sizes"], None)


def draw_figure(record, step: int, name: str, out: Path, formats: tuple[str, ...]) -> None:
    """Draw figure `name` of `step` and write it into `out` in each of `formats`."""
    import_plotting()
    from dpviz.plots.files import save_figure
    from dpviz.plots.style import figures_for_files
    from dpviz.plots.timeline import plot_timeline
    from dpviz.lessons.traces.plots import plot_allreduce_sizes

    draw = {"timeline": plot_timeline, "allreduce-sizes": plot_allreduce_sizes}[name]
    with figures_for_files():
        ax = draw(record, step=step)
    save_figure(ax.figure, out / name, formats=formats)


class FigureProcess:
    """A child forked now that imports matplotlib at once, then draws what `send` gives it.

    Use as a context manager: leaving it stops and reaps the child whatever happened (a
    failed read must not wait for an import it no longer needs)."""

    def __init__(self) -> None:
        read_end, self._write_end = os.pipe()
        self._names: list[str] = []   # the figures sent, for the error message
        self._pid = os.fork()
        if self._pid == 0:
            os.close(self._write_end)
            _child(read_end)   # never returns
        os.close(read_end)

    @property
    def pid(self) -> int | None:
        """The child's process id while it lives (None once reaped)."""
        return self._pid

    def send(self, record, step: int, names: list[str], out: Path,
             formats: tuple[str, ...]) -> None:
        """Give the child its figures to draw (only `step`'s spans travel); returns at once."""
        import dataclasses

        one_step = dataclasses.replace(record, spans=[s for s in record.spans if s.step == step])
        with os.fdopen(self._write_end, "wb") as pipe:
            pickle.dump((one_step, step, names, out, formats), pipe)
        self._write_end = None
        self._names = names

    def wait(self) -> None:
        """Wait until the figures are written; raise if the child failed (its traceback is
        on stderr)."""
        status = os.waitpid(self._pid, 0)[1]
        self._pid = None
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"drawing the figures {self._names} failed (its error is above)")

    def __enter__(self) -> FigureProcess:
        return self

    def __exit__(self, *exc) -> None:
        if self._pid is not None:
            os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            self._pid = None
        if self._write_end is not None:
            os.close(self._write_end)
            self._write_end = None


def _child(read_end: int) -> None:
    """The child's whole life: import, read the job from the pipe, fork a sibling for each
    figure but the first, draw the first; exit with 0 only if every figure was written."""
    def draw_all() -> bool:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
        gc.disable()   # a short life ended by os._exit: collections would only slow the imports
        import_plotting()
        with os.fdopen(read_end, "rb") as pipe:
            record, step, names, out, formats = pickle.load(pipe)
        siblings = [_fork_drawing(record, step, name, out, formats) for name in names[1:]]
        draw_figure(record, step, names[0], out, formats)
        return all(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) == 0 for p in siblings)

    _exit_with(draw_all)


def _fork_drawing(record, step: int, name: str, out: Path, formats: tuple[str, ...]) -> int:
    """Fork a process (with matplotlib imported already) that draws `name`; its pid."""
    pid = os.fork()
    if pid == 0:
        _exit_with(lambda: draw_figure(record, step, name, out, formats) or True)
    return pid


def _exit_with(work) -> None:
    """End this forked process once `work()` returns: exit code 0 if it returned true, else
    1, with the traceback on stderr if it raised (the exit code is all the parent reads)."""
    ok = False
    try:
        ok = work()
    except BaseException:  # noqa: BLE001 - reported here, the exit code tells the parent
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(0 if ok else 1)

"""The ranks' stderr, passed on without the profiler's `USDT … profiler_start/stop` lines.

Every time a rank starts or stops torch.profiler, kineto logs a line like

    USDT:2026-11-23 16:34:55 9987:9987 SyncActivityProfilerHandler.cpp:52] profiler_start

to the process's stderr (file descriptor 2, from C++); a CUDA build of torch on a machine
without a GPU logs a line like

    ERROR:2026-11-26 19:57:26 3031:3031 DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 35

A 4-rank run prints dozens; under a
notebook cell they show in red, often run together ("profiler_startUSDT:…") where ranks share
one stream, and read like errors to a learner. They are not errors. So each rank's fd 2 is a
pipe of its own and the parent relays it to its own `sys.stderr` (the terminal, or the cell
that is running), dropping exactly those records and passing everything else through as it
came: warnings, tracebacks, a rank's last words before it dies.

`Relay` is the parent's side (used by `launch`); `filter_stream` is the same filter as a tiny
process of its own, for ranks that dpviz does not spawn (torchrun's); `quiet_profiler` is the
same for a profiler run in this very process (a notebook cell's own `torch.profiler.profile`).
"""
from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from typing import BinaryIO, Callable

# one kineto profiler_start/stop record, wherever it sits in a line
USDT_RECORD = re.compile(rb"USDT:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [\w.]+:\d+\] profiler_(?:start|stop)")
# kineto finding no GPU for a CUDA build: the run is a CPU run, as dpviz already knows
NO_GPU_RECORD = re.compile(rb"ERROR:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ DeviceProperties\.cpp:\d+\] "
                           rb"gpuGetDeviceCount failed with code \d+")
# torch 2.11's profiler warns at every start that events are not kept across cycles; dpviz
# starts each profile once, so there is no later cycle to lose
CYCLE_WARNING = "Warning: Profiler clears events at the end of each cycle"


def drop_profiler_lines(data: bytes) -> bytes:
    """`data` (whole lines) without the profiler records; a line that held nothing else goes,
    any other text in it stays (a message run together with a record keeps its words)."""
    kept = []
    for line in data.splitlines(keepends=True):
        stripped = NO_GPU_RECORD.sub(b"", USDT_RECORD.sub(b"", line))
        if stripped == line or stripped.strip():
            kept.append(stripped)
    return b"".join(kept)


class LineFilter:
    """Feeds bytes in any chunks; hands out filtered whole lines, and the rest at the end."""

    def __init__(self, write: Callable[[bytes], None]):
        self.write, self.partial = write, b""

    def feed(self, chunk: bytes) -> None:
        data = self.partial + chunk
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:]
        if cut:
            self._emit(data[:cut])

    def close(self) -> None:
        rest, self.partial = self.partial, b""
        if rest:
            self._emit(rest)

    def _emit(self, data: bytes) -> None:
        data = drop_profiler_lines(data)
        if data:
            self.write(data)


def _to_sys_stderr(data: bytes) -> None:
    """Write to whatever sys.stderr is now: the terminal, or a notebook cell's stream (fd 2
    itself once the interpreter is shutting down and sys.stderr is gone)."""
    if sys.stderr is None:
        os.write(2, data)
        return
    sys.stderr.write(data.decode(errors="replace"))
    sys.stderr.flush()


class Relay:
    """The parent's end of every rank's stderr pipe.

    Reading happens in the caller's thread, while it waits for the ranks (`pump`) and at the
    end of each task (`drain`), so in Jupyter a rank's output lands under the cell that ran it.
    """

    def __init__(self, write: Callable[[bytes], None] = _to_sys_stderr):
        self.write = write
        self.readers: dict[int, LineFilter] = {}       # read fd → its rank's line filter

    def add(self):
        """A new pipe: returns the write end (a `Connection`, picklable to a spawned rank)."""
        import multiprocessing as mp

        reader, writer = mp.get_context("spawn").Pipe(duplex=False)
        fd = os.dup(reader.fileno())
        reader.close()
        self.readers[fd] = LineFilter(self.write)
        return writer

    def fds(self) -> list[int]:
        return list(self.readers)

    def pump(self, ready) -> None:
        """Relay whatever is readable among `ready` (objects `wait()` returned; others ignored)."""
        for fd in ready:
            if fd in self.readers:
                self._read(fd)

    def drain(self, timeout_s: float = 0.0) -> None:
        """Relay everything already written; wait up to `timeout_s` for more (at shutdown)."""
        while self.readers:
            ready, _, _ = select.select(list(self.readers), [], [], timeout_s)
            if not ready:
                return
            for fd in ready:
                self._read(fd)

    def close(self) -> None:
        self.drain()
        for fd, lines in self.readers.items():
            lines.close()
            os.close(fd)
        self.readers.clear()

    def _read(self, fd: int) -> None:
        chunk = os.read(fd, 65536)
        if chunk:
            self.readers[fd].feed(chunk)
        else:                                # the rank and every copy of its pipe are gone
            self.readers.pop(fd).close()
            os.close(fd)


def attach_stderr(writer) -> None:
    """In a rank: make fd 2 (C++ and Python alike) the pipe the parent relays."""
    os.dup2(writer.fileno(), 2)
    writer.close()
    ignore_cycle_warning()


def ignore_cycle_warning() -> None:
    """Leave out torch's warning that a profiler keeps no events across cycles (`CYCLE_WARNING`)."""
    import warnings

    warnings.filterwarnings("ignore", message=CYCLE_WARNING, category=UserWarning)


def filter_own_stderr() -> None:
    """For a process dpviz did not spawn (a torchrun rank): route fd 2 through a small filter
    process. It outlives a crash of this one (it reads to the end of the pipe), so nothing a
    dying rank writes is lost."""
    sys.stderr.flush()
    proc = subprocess.Popen([sys.executable, "-m", "dpviz.engine.rank_stderr"], stdin=subprocess.PIPE,
                            stdout=2)        # the filter writes where our stderr went so far
    os.dup2(proc.stdin.fileno(), 2)
    proc.stdin.close()
    ignore_cycle_warning()


@contextmanager
def quiet_profiler():
    """While the block runs, this process's fd 2 goes to a scratch file; afterwards everything
    it received but the profiler's records is written to `sys.stderr`, in order. For a profiler
    started in this process (ranks have their own pipes already)."""
    ignore_cycle_warning()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            scratch.seek(0)
            lines = LineFilter(_to_sys_stderr)
            lines.feed(scratch.read())
            lines.close()


def filter_stream(src: BinaryIO, dst: BinaryIO) -> None:
    """Copy `src` to `dst` line by line without the profiler records, until `src` ends."""
    lines = LineFilter(lambda data: (dst.write(data), dst.flush()))
    for chunk in iter(lambda: src.read1(65536), b""):
        lines.feed(chunk)
    lines.close()


if __name__ == "__main__":
    filter_stream(sys.stdin.buffer, sys.stdout.buffer)

"""The rank side of the emulated link (`dpviz.core.link`): one thread per rank plays the wire.

Only `ddp_run` imports this module, on a rank; torch is imported inside it, there.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time

from dpviz.core.link import Link


class LinkThread:
    """The FIFO wire of one rank: `send(buf)` returns a future at once; a thread waits the
    transfer time (sleeping: no CPU), then issues the real all-reduce, which completes it.

    A transfer starts when the bucket is handed over (or when the one before it leaves the
    wire), not when the thread next gets a core: a real wire does not wait for a CPU, and on
    a busy machine the thread can wake milliseconds late, which moved transfers past the end
    of a short backward and hid the overlap DDP's hand-over makes possible. For the same
    reason a transfer leaves the wire at its formula's end, however late the thread wakes:
    the next one starts then (before, each waited for the thread's wake-up, so lateness added
    up along a queue of buckets: 1.21× the formula in a 6-bucket step at 4 Gb/s, benchmarks/
    README.md, "predict_vs_live"). The thread's lateness shows where it is: the real
    all-reduce is issued when the thread woke, after the transfer's end.

    Buckets leave in the order they were handed over, on every rank the same (DDP hands
    them in index order), so the collectives keep the same order on every rank.
    """

    def __init__(self, link: Link, world_size: int):
        self.link, self.world_size = link, world_size
        self.spans: list[tuple[int, float, float]] = []   # (bucket, start, end) perf_counter s
        # The real all-reduces after each transfer: (bucket, numel, issued, done). Issued from
        # this thread, gloo's own events escape the profiler (it records the main thread's
        # work only), so their times are kept here; `done` is when gloo's callback ran.
        self.reduces: list[tuple[int, int, float, float]] = []
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="dpviz-link", daemon=True)
        self._thread.start()

    def send(self, index: int, buf):
        """Queue one bucket (already divided by the world size); a future of the reduced one."""
        import torch

        done = torch.futures.Future()
        self._queue.put((index, buf, done, time.perf_counter()))
        return done

    def trace_events(self, clock_s: float) -> list[dict]:
        """The transfers and their all-reduces as chrome trace events, on perf_counter
        microseconds relative to the clock mark `clock_s` (`assemble_run` moves them onto the
        trace's clock). The profiler does not see annotations made on a Python thread, so the
        link keeps its own times; those of steps run before the profiler started are left out."""
        from dpviz.analysis.scan import LINK_ALLREDUCE_PREFIX, LINK_PREFIX

        transfers = [{"ph": "X", "cat": "user_annotation", "name": f"{LINK_PREFIX}{index}",
                      "tid": "dpviz link", "ts": (start - clock_s) * 1e6, "dur": (end - start) * 1e6,
                      "args": {"link": dataclasses.asdict(self.link)}}
                     for index, start, end in self.spans if start >= clock_s]
        reduces = [{"ph": "X", "cat": "user_annotation", "name": f"{LINK_ALLREDUCE_PREFIX}{index}",
                    "tid": "dpviz link all-reduce", "ts": (start - clock_s) * 1e6,
                    "dur": (end - start) * 1e6, "args": {"Input Dims": [[numel]], "Input type": ["float"]}}
                   for index, numel, start, end in self.reduces if start >= clock_s]
        return transfers + reduces

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _serve(self) -> None:
        import torch.distributed as dist

        free_at = 0.0
        while (item := self._queue.get()) is not None:
            index, buf, done, handed = item
            try:
                start = max(handed, free_at)
                end = start + self.link.transfer_ms(buf.numel() * buf.element_size(),
                                                    self.world_size) / 1e3
                while (left := end - time.perf_counter()) > 0:
                    time.sleep(left)
                free_at = end
                self.spans.append((index, start, end))
                issued = time.perf_counter()
                dist.all_reduce(buf, async_op=True).get_future().then(
                    lambda f, i=index, n=buf.numel(), t=issued, done=done: self._complete(i, n, t, done, f))
            except Exception as err:  # surfaces in DDP's backward, naming the cause
                done.set_exception(err)

    def _complete(self, index: int, numel: int, issued: float, done, reduced) -> None:
        """Note the real all-reduce's end and hand its result (or error) to DDP's future."""
        self.reduces.append((index, numel, issued, time.perf_counter()))
        try:
            done.set_result(reduced.value()[0])
        except Exception as err:
            done.set_exception(err)

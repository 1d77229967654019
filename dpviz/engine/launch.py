# Over 300 lines: the one module that spawns; start, collect, failure and teardown share private state.
"""Local ranks as processes: start (forked from a torch-preloaded forkserver), rendezvous on
127.0.0.1, run tasks, tear down.

The only module that spawns. A `Cluster` keeps its ranks (and their process group) alive
between tasks, so a notebook knob re-runs in a fraction of a cold launch. A task is any
importable function `fn(ctx, *args) -> JSON-able`, run on every rank at once.

Failure is loud and leaves nothing behind: a rank that raises, dies or hangs becomes one
exception naming the rank; all ranks are then killed, and the next task starts fresh ones.
A rank whose parent disappears (kernel restart, kill -9) exits by itself within a second.
"""
from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import signal
import shutil
import socket
import sys
import tempfile
import threading
import time
import traceback
import weakref
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import wait
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from dpviz.core.config import default_device, validate_world_size
from dpviz.engine.rank_stderr import Relay, attach_stderr

FACADE = ("Cluster", "RankError", "RankTimeout")  # what `dpviz.<name>` offers from here

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 60.0
START_METHODS = ("forkserver", "spawn")
# What the forkserver imports once for every rank it forks (see `_context`). torch._dynamo:
# DDP's constructor imports it lazily, 5-8 s per rank on a loaded 2-core machine, paid once here.
PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "torch.profiler", "torch._dynamo",
           "dpviz.engine.ddp_run"]


def cuda_device_count() -> int:
    """GPUs torch sees here (NCCL runs one rank per GPU); 0 without CUDA."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def require_gpus(world_size: int, backend: str, device: str) -> None:
    """Refuse, before anything spawns, ranks this machine has no GPUs for: NCCL needs one GPU
    per rank; gloo ranks on "cuda" share the GPUs round-robin, so they need one at least."""
    if device != "cuda":
        return
    gpus = cuda_device_count()
    if backend == "nccl" and world_size > gpus:
        raise ValueError(f"backend nccl needs one GPU per rank: asked for {world_size} ranks, "
                         f"this machine has {gpus} GPU(s). Use --backend gloo on CPU.")
    if not gpus:
        raise ValueError("device cuda needs a GPU, and torch sees none here: use device cpu")


class RankError(RuntimeError):
    """A rank raised or died; `.rank` names it and the message carries its traceback."""

    def __init__(self, rank: int, message: str):
        self.rank = rank
        super().__init__(f"rank {rank}: {message}")


class RankTimeout(RankError, TimeoutError):
    """Ranks that did not answer within the timeout (the first is in `.rank`, all in `.ranks`)."""

    def __init__(self, ranks: list[int], timeout_s: float, what: str):
        self.ranks = ranks
        RuntimeError.__init__(self, f"rank(s) {', '.join(map(str, ranks))} did not finish {what} "
                                    f"within {timeout_s:g} s; all ranks were stopped")
        self.rank = ranks[0]


@dataclass(frozen=True)
class RankContext:
    """What a task learns about where it runs."""

    rank: int
    world_size: int
    backend: str
    device: str      # "cpu", or "cuda:I" (rank R on GPU R mod the GPU count)
    workdir: str     # a scratch folder shared by all ranks of the cluster
    held: list = field(default_factory=list, repr=False, compare=False)   # `free_after_reply`

    def free_after_reply(self, *objects) -> None:
        """Keep `objects` until this task's result has been sent, then drop them: freeing a
        big one (a profile's thousands of events) then takes the rank's idle time
        instead of the caller's wait. Outside a Cluster they go with the context."""
        self.held.extend(objects)


def cores_note(ranks: int | None = None) -> str:
    """A sentence about the cores this process may run on, read from the OS, so a notebook
    states the reader's machine, not the author's (`os.sched_getaffinity`)."""
    cores = len(os.sched_getaffinity(0))
    shared = f"shared by the {ranks} ranks and" if ranks else "shared"
    return (f"{cores} CPU core{'s' if cores != 1 else ''} available to this process, {shared} "
            "with whatever else runs on the machine")


# --- inside a rank ----------------------------------------------------------------------

def rank_info(ctx: RankContext) -> dict:
    """A task that shows what a rank is: its own process, rank, world size and device."""
    import torch
    import torch.distributed as dist

    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "pid": os.getpid(),
            "backend": dist.get_backend(), "device": ctx.device,
            "intra_op_threads": torch.get_num_threads()}


def _exit_when_orphaned(parent_pid: int) -> None:
    """Watchdog thread: a rank must never outlive the process that started it.

    A rank's OS parent is the forkserver, which exits as soon as the process that started it
    dies; either way the rank is re-parented, and leaves.
    """
    forkserver = os.getppid()
    while os.getppid() == forkserver and pid_alive(parent_pid):
        time.sleep(0.5)
    os._exit(3)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rank_device(rank: int, device: str, gpus: int) -> str:
    """The torch device of `rank` on a `device` cluster: GPUs are dealt round-robin, so NCCL's
    one rank per GPU gets GPU `rank`, and gloo ranks beyond the GPU count share them."""
    return f"cuda:{rank % gpus}" if device == "cuda" else "cpu"


def _rank_main(rank: int, world_size: int, backend: str, device: str, store_port: int,
               workdir: str, conn, parent_pid: int, timeout_s: float, stderr) -> None:
    attach_stderr(stderr)  # the parent relays it, minus the profiler's USDT lines
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    # Ctrl-C, and a Jupyter kernel's interrupt or shutdown, reach the whole process group. The
    # parent decides (it stops every rank), so a rank never prints a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # 2 cores shared by all ranks: one intra-op thread each
        device = rank_device(rank, device, cuda_device_count() if device == "cuda" else 0)
        if device != "cpu":
            torch.cuda.set_device(device)   # NCCL's communicator and the tensors' default GPU
        store = dist.TCPStore(LOOPBACK, store_port, world_size, is_master=False,
                              timeout=timedelta(seconds=timeout_s))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))
        ctx = RankContext(rank, world_size, backend, device, workdir)
        conn.send(("ready", None))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        msg = conn.recv()
        if msg is None:
            break
        fn, args = msg
        try:
            conn.send(("ok", fn(ctx, *args)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))
        ctx.held.clear()   # what the task asked to free once its result was on its way
    dist.destroy_process_group()
    # Nothing is left to clean up (the parent owns the workdir); skipping the interpreter's
    # own teardown makes close() take milliseconds instead of seconds.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# --- in the parent ----------------------------------------------------------------------

class _Ranks:
    """The live processes of one cluster start; a finalizer kills them if it is dropped."""

    def __init__(self, world_size: int, backend: str, timeout_s: float, start_method: str,
                 device: str):
        import torch.distributed as dist  # the store lives here: a free port with no race

        self.workdir = tempfile.mkdtemp(prefix="dpviz-")
        self.store = loopback_store(dist, timeout_s)
        ctx = _context(start_method)
        self.conns, self.procs, self.stderr = [], [], Relay()
        for rank in range(world_size):
            parent_end, child_end = ctx.Pipe()
            stderr = self.stderr.add()
            proc = ctx.Process(target=_rank_main, name=f"dpviz-rank{rank}", daemon=True,
                               args=(rank, world_size, backend, device, self.store.port, self.workdir,
                                     child_end, os.getpid(), timeout_s, stderr))
            try:
                proc.start()
            except EOFError:  # the forkserver died, e.g. a preloaded module failed to import
                _kill(self.procs, self.conns, self.workdir, self.stderr)
                raise RankError(rank, "could not be started: the forkserver that forks ranks "
                                      "exited (its error is printed above)") from None
            child_end.close()
            stderr.close()
            self.conns.append(parent_end)
            self.procs.append(proc)
        self.finalizer = weakref.finalize(self, _kill, self.procs, self.conns, self.workdir,
                                          self.stderr)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def loopback_store(dist, timeout_s: float):
    """The rendezvous store's server, listening on 127.0.0.1 only.

    torch's store server binds every interface whatever host name it is given (the name only
    tells clients where to connect), which would open an unauthenticated key-value store that
    the ranks trust to the whole network for as long as the kernel lives. A socket bound to
    loopback here and handed over as `master_listen_fd` (torch then owns and closes it) is the
    only listener. A torch without that parameter is refused rather than allowed to listen on
    every interface.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        try:
            store = dist.TCPStore(LOOPBACK, port, None, is_master=True, wait_for_workers=False,
                                  timeout=timedelta(seconds=timeout_s), master_listen_fd=sock.fileno())
        except TypeError as err:
            raise RuntimeError("this torch's TCPStore takes no master_listen_fd, so its rendezvous "
                               "store would listen on every network interface; dpviz needs a torch "
                               "that can listen on 127.0.0.1 only") from err
        sock.detach()  # the store's server owns the socket now, and closes it
    return store


def _context(start_method: str):
    """By default ranks fork from one forkserver that imported torch once, instead of each
    spawned rank importing it again (4 imports on 2 cores was most of a cold start:
    benchmarks/warm_vs_cold.py compares both). The forkserver is a clean process (no kernel
    threads are forked); it starts on first use and lives as long as this process."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo pairs bind to loopback too
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


def prewarm_forkserver() -> None:
    """Start the forkserver (its one torch import) now, in the background: a notebook makes
    its Cluster (or loads the `%ranks` extension) in its first cells and starts ranks a few
    cells later, by when the forkserver is ready. Idempotent."""
    from multiprocessing import forkserver

    _context("forkserver")
    threading.Thread(target=forkserver.ensure_running, name="dpviz-forkserver", daemon=True).start()


def _kill(procs, conns, workdir: str, stderr: Relay) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    for proc in procs:
        proc.join(5)
    for conn in conns:
        conn.close()
    stderr.close()  # the ranks' last words, relayed
    shutil.rmtree(workdir, ignore_errors=True)


def _stop(procs, conns, workdir: str, stderr: Relay) -> None:
    """Polite shutdown: ask each rank to leave its process group, then make sure."""
    for conn in conns:
        try:
            conn.send(None)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 5
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    _kill(procs, conns, workdir, stderr)


class Cluster:
    """`world_size` warm local ranks. Use as a context manager, or call `close()`.

    >>> with Cluster(2) as cluster:
    ...     cluster.run_task(some_module.some_function, arg)   # one result per rank
    """

    _ids = itertools.count()

    def __init__(self, world_size: int = 2, backend: str = "gloo", timeout_s: float = 120.0,
                 start_method: str = "forkserver", device: str | None = None):
        if start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {START_METHODS}, got {start_method!r}")
        self.start_method = start_method
        self.world_size = validate_world_size(world_size, backend, device=device)
        self.backend = backend
        self.device = default_device(backend) if device is None else device   # "cpu" or "cuda"
        require_gpus(self.world_size, backend, self.device)
        self.timeout_s = float(timeout_s)
        self._ranks: _Ranks | None = None
        self._starts = 0
        self.start_seconds = 0.0   # how long the last (re)start took, spawn to all joined
        if start_method == "forkserver":
            prewarm_forkserver()

    # lifecycle
    def __enter__(self) -> "Cluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self._ranks is not None

    @property
    def starts(self) -> int:
        """How many times ranks were started: a widget compares it before and after a run
        to say that its move (re)started them, and how long that took (`start_seconds`)."""
        return self._starts

    def pids(self) -> list[int]:
        """The ranks' process ids (empty when not started)."""
        return self._ranks.pids() if self._ranks else []

    @property
    def workdir(self) -> str:
        self.start()
        return self._ranks.workdir

    def start(self, announce: bool = True) -> None:
        """Spawn the ranks and wait until every one has joined the process group. A restart
        says so on stderr unless `announce` is off: a widget says it in its status line
        (`dpviz.widgets.slider.start_ranks`), where red text in JupyterLab's log console
        would read as an error."""
        if self._ranks is not None:
            return
        if self._starts and announce:   # stopped by close() or an error: say so, a restart costs seconds
            print(f"dpviz: restarting {self.world_size} {self.backend} ranks (they were stopped)",
                  file=sys.stderr)
        self._starts += 1
        began = time.perf_counter()
        self._ranks = _Ranks(self.world_size, self.backend, self.timeout_s, self.start_method,
                             self.device)
        self._collect("start-up", min(self.timeout_s, START_TIMEOUT_S) + 30)
        self.start_seconds = time.perf_counter() - began

    def close(self) -> None:
        """Stop the ranks cleanly; safe to call twice."""
        ranks, self._ranks = self._ranks, None
        if ranks is not None:
            ranks.finalizer.detach()
            _stop(ranks.procs, ranks.conns, ranks.workdir, ranks.stderr)

    def _abort(self) -> None:
        ranks, self._ranks = self._ranks, None
        if ranks is not None:
            ranks.finalizer()

    # work
    def run_task(self, fn: Callable[..., Any], *args, timeout_s: float | None = None) -> list[Any]:
        """Run `fn(ctx, *args)` on every rank; returns the results in rank order.

        `fn` must be importable (defined in a module, not in a notebook cell): spawned ranks
        find it by name.
        """
        if getattr(fn, "__module__", "__main__") == "__main__" or "<locals>" in fn.__qualname__:
            raise ValueError(f"{fn.__qualname__} must be defined at the top level of an importable "
                             "module: ranks are separate processes and import it by name")
        self.start()
        try:
            for conn in self._ranks.conns:
                conn.send((fn, args))
        except (OSError, ValueError):
            self._abort()
            raise RankError(0, "a rank's pipe is closed; the cluster was restarted, run again")
        return self._collect(fn.__qualname__, timeout_s or self.timeout_s)

    def _collect(self, what: str, timeout_s: float) -> list[Any]:
        ranks = self._ranks
        results: dict[int, Any] = {}
        by_conn = {conn: r for r, conn in enumerate(ranks.conns)}
        by_sentinel = {p.sentinel: r for r, p in enumerate(ranks.procs)}
        deadline = time.monotonic() + timeout_s
        try:
            while len(results) < self.world_size:
                left = deadline - time.monotonic()
                pending = [c for c, r in by_conn.items() if r not in results]
                ready = wait(pending + list(by_sentinel) + ranks.stderr.fds(), timeout=max(0.0, left))
                if not ready:
                    late = sorted(set(range(self.world_size)) - set(results))
                    raise RankTimeout(late, timeout_s, what)
                ranks.stderr.pump(ready)
                if any(obj in by_sentinel or obj in by_conn for obj in ready):
                    ranks.stderr.drain()  # what a rank wrote before it answered or died
                ready = [obj for obj in ready if obj in by_conn or obj in by_sentinel]
                for obj in sorted(ready, key=lambda o: o in by_sentinel):  # messages first
                    if obj in by_conn:
                        rank = by_conn[obj]
                        try:
                            status, payload = obj.recv()
                        except EOFError:
                            continue  # its sentinel reports the death
                        if status == "error":
                            raise RankError(rank, f"raised during {what}:\n{payload}")
                        results[rank] = payload
                    else:
                        rank = by_sentinel[obj]
                        ranks.procs[rank].join(1)
                        code = ranks.procs[rank].exitcode
                        raise RankError(rank, f"died during {what} (exit code {code})")
        except BaseException:  # errors, timeouts and KeyboardInterrupt all stop every rank
            self._abort()
            raise
        return [results[r] for r in range(self.world_size)]


@contextmanager
def using_cluster(cluster: Cluster | None, world_size: int = 2, backend: str = "gloo",
                  timeout_s: float = 120.0, *, exact: bool = False,
                  device: str | None = None) -> Iterator[Cluster]:
    """Use this warm `cluster`, or start `world_size` ranks for the block and stop them after.

    Every live verb takes `cluster=None`: a notebook passes its warm ranks so a knob re-runs
    in a fraction of a cold start; a one-off call gets fresh ranks that leave nothing behind.
    `exact` requires a given cluster to have exactly `world_size` `backend` ranks on `device`
    (None: the backend's own).
    """
    if cluster is None:
        with Cluster(world_size, backend, timeout_s, device=device) as fresh:
            yield fresh
        return
    device = default_device(backend) if device is None else device
    if exact and (cluster.world_size, cluster.backend, cluster.device) != (world_size, backend, device):
        on = (f" on {cluster.device}", f" on {device}") if cluster.device != device else ("", "")
        raise ValueError(f"this cluster has {cluster.world_size} {cluster.backend} ranks{on[0]} but "
                         f"the config asks for {world_size} {backend} ranks{on[1]}: start a new Cluster")
    yield cluster

# Over 300 lines: one streaming pass (TraceScan) and the span fixes it needs, private to it.
"""PyTorch profiler chrome traces → typed spans on a common clock; merging ranks.

Events are read once, one at a time (`TraceScan.add`), so a trace never has to sit in
memory whole; everything downstream is a pure function of the spans. Two shapes of trace:

- CPU (gloo): collectives are `gloo:*` annotations on gloo worker threads; forward,
  backward and optimizer are the CPU ops of the main and autograd threads.
- GPU (NCCL): what costs time is the kernels. Communication is the `nccl*` kernels on
  their own stream (args `Collective name`, `In msg nelems`, `dtype`), compute is every
  other kernel. A kernel is forward, backward or optimizer when the CPU op that launched
  it was (found through the trace's `ac2g` flow events), so overlap is measured on the
  GPU timeline. The CPU ops themselves only classify kernels: they are not spans.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import gc
import json
import math
import os
import re
from collections import Counter, defaultdict, deque
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

from dpviz.analysis.hta import HTA_DIFFERS, STEP_WORD, HtaTrace, kernel_type
from dpviz.core.record import RecordError, Span, read_json

# Annotations dpviz's own runs add (record_function names): steps, micro-steps, comm hook.
STEP_PREFIX = "dpviz:step#"
MICRO_PREFIX = "dpviz:micro_step#"
HOOK_PREFIX = "dpviz:bucket#"
LINK_PREFIX = "dpviz:link#"        # an emulated link's transfer of one bucket (dpviz.core.link)
LINK_ALLREDUCE_PREFIX = "dpviz:link_allreduce#"  # the real all-reduce after it (a gloo call)
CLOCK_MARK = "dpviz:clock"         # ties the link thread's clock to the trace's
PROFILER_STEP = "ProfilerStep#"   # torch.profiler's schedule marks each prof.step() so

DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4,
               "long int": 8, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
               "Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Byte": 1,
               "Char": 1, "Short": 2, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1}
# Kineto's category names by schema generation (libkineto's output_json.cpp and
# ActivityType.cpp over time), each older name → today's, which dpviz reads:
#   PyTorch 1.8–1.9 (2021; 1.8's first builds wrote a bare JSON array of events, later ones
#     {"schemaVersion": 1, "traceEvents": …}; 1.9 adds deviceProperties, some builds
#     computeProperties): Operator, Runtime, Kernel, Memcpy, Memset; launch flows "async"
#     named "launch"; thread ids as text, GPU rows' "stream 7"; no distributedInfo.
#   PyTorch 1.10–1.11 (from Jun 2021): the CPU side lowercase (cpu_op, user_annotation), the
#     GPU side still Runtime, Kernel, Memcpy, Memset, GPU annotations "gpu_user_Annotation";
#     thread ids as numbers; launch flows "async_gpu" named after the runtime call, from
#     Nov 2021 "async_cpu_to_gpu" named "async_gpu".
#   PyTorch 1.12 (from Apr 2022): every category lowercase (cuda_runtime, kernel, gpu_memcpy,
#     gpu_memset, gpu_user_annotation).
#   PyTorch 1.13 and later (from Oct 2022): launch flows "ac2g"; later cuda_driver, cuda_sync,
#     collective args on NCCL kernels (2.1+), µs with decimals (2.3+).
# Every generation writes `stream` and `correlation` args on GPU events and `correlation` on
# the runtime call that launched them: GPU work is its category on a stream, whatever else
# the file holds (deviceProperties, distributedInfo or neither).
CATEGORY_OF = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel",
               "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
               "gpu_user_Annotation": "gpu_user_annotation",
               "async": "ac2g", "async_gpu": "ac2g", "async_cpu_to_gpu": "ac2g"}
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
# Categories (today's names) that dpviz reads or knowingly skips; an X event of any other
# category is kept as an "other" span (a newer profiler, not an error).
KNOWN_CATEGORIES = frozenset({
    "cpu_op", "user_annotation", "gpu_user_annotation", "cuda_runtime", "cuda_driver",
    "python_function", "Trace", "ac2g", "fwdbwd", "cpu_instant_event", "overhead",
    "cuda_profiler_range", "cuda_sync", *GPU_CATEGORIES})
# Known categories that never become spans (launch timing comes from the ac2g flows, or from
# the runtime call with the kernel's correlation id).
SKIPPED_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "python_function", "Trace",
                                "gpu_user_annotation", "overhead",
                                "cuda_sync"})   # a stream or event sync: waiting, not GPU work
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})   # launch calls (CUDA, HIP)
FLOW_CATEGORIES = frozenset({"ac2g"})   # CPU launch → GPU event flows
# CPU ops that launch collectives: PyTorch's c10d calls, their NCCL/gloo annotations, and
# record_param_comms (which names its collective in newer PyTorch): a kernel's op is theirs.
COMM_CALL_PREFIXES = ("c10d::", "nccl:", "record_param_comms")
PHASES = ("optimizer", "backward", "forward")   # a launch inside two phases takes the first
COMM_KINDS = ("allreduce", "collective")       # span kinds that are communication
# Collective op kinds, and the words naming them in kernel names (`ncclKernel_AllGather_…`,
# `ncclDevKernel_SendRecv`), gloo annotations (`gloo:reduce_scatter`) and NCCL kernels'
# `Collective name` arg (`_allgather_base`, `all_to_allv`), lower-cased, '_' dropped.
# Order matters: the first word found wins ("reducescatter" before "reduce").
COMM_OPS = {"reducescatter": "reduce_scatter", "allreduce": "all_reduce",
            "allgather": "all_gather", "alltoall": "all_to_all", "broadcast": "broadcast",
            "barrier": "barrier", "sendrecv": "send_recv", "send": "send_recv",
            "recv": "send_recv", "gather": "gather", "scatter": "scatter", "reduce": "reduce"}


# Phases read for no span, silently: metadata, instant events, flow steps and ends, and
# flow starts of categories other than the CPU → GPU launch flows.
QUIET_PHASES = ("M", "i", "I", "f", "s", "t")


class EventFields(NamedTuple):
    """One trace event's fields that `TraceScan` reads, with `dict.get`'s defaults."""

    ph: Any
    cat: Any
    name: Any
    ts: Any
    dur: Any
    tid: Any
    id: Any
    args: Any


class TraceError(RecordError):
    """A trace file that is not a PyTorch profiler chrome trace."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a trace is read or its spans summed up,
    and as it was after (a decorator or a `with`).

    Both make a few objects per event or span (spans, tuples, cut intervals) and keep
    most: every collection the allocations trigger walks all of them again, looking for
    cycles they do not form, which costs about as much as the work itself. Memory is still
    freed by reference counting as soon as nothing holds it.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_trace(path: str | os.PathLike) -> dict:
    """Load a whole `.json` or `.json.gz` chrome trace, or fail saying what is wrong with it."""
    try:
        data = read_json(path)
    except RecordError as err:
        raise TraceError(str(err)) from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path} is not a profiler trace: no 'traceEvents' list")
    return data


def trace_rank(trace: dict, path: str | os.PathLike | None = None) -> int:
    """Rank from the trace's `distributedInfo`, else from a `rank<N>` in the file name."""
    info = trace.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    rank = rank_from_name(path) if path else None
    if rank is None:
        raise TraceError(f"{path or 'trace'} has no distributedInfo and no 'rank<N>' in its name: "
                         "pass the rank explicitly")
    return rank


def rank_from_name(path: str | os.PathLike) -> int | None:
    """`rank3.json`, `trace-rank-3.json.gz`, `rank_3...` → 3; None if the name has no rank."""
    match = re.search(r"rank[-_]?(\d+)", Path(path).name)
    return int(match.group(1)) if match else None


@functools.lru_cache(maxsize=1024)
def comm_op(name: str, collective_name: str | None = None) -> str:
    """The collective a communication event runs: one of COMM_OPS' values, else "other".

    NCCL runs all-to-all, send and recv as `SendRecv` kernels: its `Collective name` arg
    (written by PyTorch's NCCL kernels since 2.1) says which, so it wins when it names one.
    """
    for text in (collective_name, name.split(":", 1)[-1].split("(")[0]):
        words = (text or "").lower().replace("_", "")
        for word, op in COMM_OPS.items():
            if word in words:
                return op
    return "other"


@functools.lru_cache(maxsize=8192)   # a trace repeats a few thousand (name, category) pairs
def classify(name: str, cat: str) -> str | None:
    """The span kind of one profiler event, or None for events dpviz does not draw."""
    if cat == "kernel":
        if kernel_type(name) == "communication":   # NCCL's and RCCL's kernels, as HTA tells them
            return "allreduce" if comm_op(name) == "all_reduce" else "collective"
        return "compute"
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "memcpy"
    if cat == "gpu_user_annotation":
        return None   # GPU-side copies of CPU annotations: the kernels say it better
    if name.startswith("aten::"):
        return None   # an operator (most CPU events): no mark, phase or collective is one
    if name.startswith((STEP_PREFIX, PROFILER_STEP)):
        return "step"
    if name.startswith(MICRO_PREFIX):
        return "micro_step"
    if name.startswith(HOOK_PREFIX):
        return "bucket_hook"
    if name.startswith(LINK_PREFIX):
        return "link"
    if name.startswith(LINK_ALLREDUCE_PREFIX):
        return "allreduce"
    if name == "DistributedDataParallel.forward":
        return "forward"
    if name.startswith("autograd::engine::evaluate_function: "):
        return "backward"
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return "optimizer"
    if name in ("c10d::allreduce_", "c10d::allreduce_coalesced_", "nccl:all_reduce"):
        return "allreduce_launch"   # NCCL: the kernel is the all-reduce; this only enqueues it
    if name.startswith("gloo:"):
        return "allreduce" if comm_op(name) == "all_reduce" else "collective"
    return None


def _arg_map(args):
    """An event's args as something `get` and `in` read: a dict, the fast reader's typed
    args, or (anything else a trace wrote there) no args."""
    return args if type(args) is dict or hasattr(args, "get") else {}


def process_group(args) -> str | None:
    """The process group a collective event names: its `Process Group Name` (the same on
    every rank of the group), else its `Process Group Ranks`; None if neither."""
    name = args.get("Process Group Name")
    if isinstance(name, (str, int)) and not isinstance(name, bool):
        return str(name)
    ranks = args.get("Process Group Ranks")
    return f"ranks {ranks}" if isinstance(ranks, (str, list)) and ranks else None


def sequence_number(args) -> int | None:
    """A collective's sequence number in its process group (`Seq`, written by newer
    PyTorch): the same on every rank of the group for one collective."""
    seq = args.get("Seq")
    if isinstance(seq, str) and seq.isdigit():
        return int(seq)
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def event_bytes(args) -> int | None:
    """Message size from an event's recorded shapes (gloo/c10d) or NCCL kernel args (a dict,
    or anything `get` and `in` read as one)."""
    if "In msg nelems" in args:
        try:
            return int(args.get("In msg nelems")) * DTYPE_BYTES.get(str(args.get("dtype")), 4)
        except (TypeError, ValueError, OverflowError):
            return None
    dims, types = args.get("Input Dims", args.get("Input dims")), args.get("Input type")   # 1.8: "dims"
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or not types:
        return None
    first = dims[0]
    while isinstance(first, list) and first and isinstance(first[0], list):  # a TensorList
        first = first[0]
    if types[0] == "TensorList" and first == []:
        return None    # a c10d call's TensorList: its shapes are not recorded
    size = DTYPE_BYTES.get(types[0]) if isinstance(types[0], str) else None
    if size is None and types[0] == "TensorList":
        size = 4
    if size is None or not isinstance(first, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in first):
        return None
    return math.prod(first) * size


@functools.lru_cache(maxsize=4096)   # a trace repeats a few hundred kernel names
def short_kernel_name(name: str) -> str:
    """Drop a kernel's parameter list: 'ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, …)'
    → 'ncclKernel_AllReduce_RING_LL_Sum_float' (names like '(anonymous namespace)' stay)."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i].rstrip() or name
    return name


class TraceScan:
    """One rank's trace, fed one event at a time; `spans(rank)` resolves it into spans.

    Keeps only what classification needs (spans, kernels, flow starts), never the raw
    events. Malformed events are counted and skipped: a trace that is partly odd still
    draws, and `notes()` says what was skipped.
    """

    def __init__(self) -> None:
        self.cpu: list[Span] = []                    # classified CPU spans, rank filled later
        self.kernels: list[tuple[Span, int | None]] = []   # GPU spans and their correlation id
        self.launch_at: dict[int, tuple[str, float]] = {}  # flow id → (CPU thread, launch ts)
        self.runtime_at: dict[int, tuple[str, float]] = {}  # correlation id → (thread, ts) of the launch call
        self.c10d: list[tuple[float, str]] = []      # (ts, op) of every c10d::* collective call
        self.comm_calls: list[CommCall] = []        # CPU ops that launch collectives
        # (thread, ts, dur) as written of the other CPU operators: checked only where read
        # (a CPU trace's compute), as a GPU trace has tens of thousands and never reads them
        self.cpu_ops: list[tuple[Any, Any, Any]] = []
        self.events = 0
        self.phased = 0          # events with a chrome-trace phase ('ph'): none means not a trace
        self.malformed = 0
        self.unknown: Counter[str] = Counter()       # unknown categories kept as "other"
        self.phases_skipped: Counter[str] = Counter()  # ph values dpviz does not read
        self.hta = HtaTrace()   # what HTA's breakdown and overlap read of this trace

    def add(self, ev) -> None:
        """Read one trace event (any JSON value: junk is counted, never raised)."""
        if not isinstance(ev, dict):
            self.events += 1
            self.malformed += 1
            return
        self.add_batch((EventFields(ev.get("ph"), ev.get("cat", ""), ev.get("name"), ev.get("ts"),
                                    ev.get("dur", 0), ev.get("tid", ""), ev.get("id"),
                                    ev.get("args")),))

    def add_batch(self, events: Iterable) -> None:
        """Read events given as objects with the fields as attributes (`ph`, `cat`, `name`,
        `ts`, `dur`, `tid`, `id`, `args`: an `EventFields`, or the fast reader's typed events).

        Most of a GPU trace is flow ends, instant events and runtime calls, which only
        count or link: they are read here, in one loop, without a call per event.
        """
        runtime_at, launch_at, cpu_ops = self.runtime_at, self.launch_at, self.cpu_ops
        complete, hta_add, category_of = self._complete, self.hta.add, CATEGORY_OF
        count = phased = malformed = 0
        for e in events:
            count += 1
            ph, cat = e.ph, e.cat
            if type(ph) is str:
                phased += 1
            if type(cat) is str:
                cat = category_of.get(cat, cat)
            if ph == "X":
                name, args = e.name, e.args
                if type(cat) is not str:
                    malformed += 1
                    continue
                stream = corr = None
                if type(args) is dict:
                    stream, corr = args.get("stream"), args.get("correlation")
                elif args is not None:
                    stream, corr = getattr(args, "stream", None), getattr(args, "correlation", None)
                if stream is not None or corr is not None or (type(name) is str and STEP_WORD in name):
                    # HTA goes by these args, not by category (dpviz.analysis.hta); ts as written
                    hta_add(name, e.ts, e.dur, stream, corr, cat in GPU_CATEGORIES,
                            cat == "gpu_user_annotation")
                if cat in SKIPPED_CATEGORIES:
                    if cat in RUNTIME_CATEGORIES and type(corr) is int:
                        ts = _number(e.ts)
                        if ts is not None:
                            runtime_at[corr] = (str(e.tid), ts)
                elif type(name) is not str:
                    malformed += 1
                elif ((kind := classify(name, cat)) is None and cat == "cpu_op"
                      and not name.startswith(COMM_CALL_PREFIXES)):   # an operator: CPU traces' compute
                    cpu_ops.append((e.tid, e.ts, e.dur))
                else:
                    complete(kind, cat, name, e.ts, e.dur, e.tid, args)
            elif ph == "s" and type(cat) is str and cat in FLOW_CATEGORIES:   # CPU end of a launch → kernel flow
                ts, flow = _number(e.ts), e.id
                if ts is not None and isinstance(flow, int):
                    launch_at[flow] = (str(e.tid), ts)
            elif ph not in QUIET_PHASES:
                self.phases_skipped[str(ph)] += 1
        self.events += count
        self.phased += phased
        self.malformed += malformed

    def _complete(self, kind: str | None, cat: str, name: str, ts, dur, tid, args) -> None:
        """Read one complete ('X') event of kind `kind` (`classify`'s) that is neither a
        runtime call nor a plain operator."""
        if name.startswith(COMM_CALL_PREFIXES):
            if name.startswith("c10d::") and _number(ts) is not None:   # what PyTorch asked for
                self.c10d.append((_number(ts), comm_op(name)))
            self._comm_call(name, cat, ts, dur, tid, args)
        if kind is None and cat not in KNOWN_CATEGORIES:
            kind = "other"
            self.unknown[cat] += 1
        if kind is None:
            return
        start, dur = _number(ts), _number(dur)
        if start is None or dur is None or dur < 0:
            self.malformed += 1
            return
        comm = kind in COMM_KINDS or kind == "allreduce_launch"   # the spans whose bytes count
        if comm or cat in GPU_CATEGORIES:   # (a forward op's shapes are read by no figure)
            args = _arg_map(args)
        else:
            args = {}
        op = group = seq = None
        if kind in COMM_KINDS:
            collective = args.get("Collective name")
            op = comm_op(name, collective if isinstance(collective, str) else None)
            group, seq = process_group(args), sequence_number(args)
        nbytes = event_bytes(args) if comm else None
        if cat in GPU_CATEGORIES:
            corr = args.get("correlation")
            self.kernels.append((_span(rank=-1, tid=f"stream {args.get('stream', tid)}",
                                       name=short_kernel_name(name), kind=kind, start_us=start,
                                       end_us=start + dur, bytes=nbytes, op=op, group=group,
                                       seq=seq),
                                 corr if isinstance(corr, int) else None))
        else:
            self.cpu.append(_span(rank=-1, tid=str(tid), name=name, kind=kind, start_us=start,
                                  end_us=start + dur, bytes=nbytes, op=op, group=group, seq=seq))

    def _comm_call(self, name: str, cat: str, ts, dur, tid, args) -> None:
        """Keep a CPU op that launches a collective, with the op it names (else skip it) and
        the message size its recorded shapes give (`nccl:*` and record_param_comms record
        the tensor; a c10d call's TensorList shapes are empty)."""
        args = _arg_map(args)
        if name == "record_param_comms":
            collective = args.get("Collective name")
            op = comm_op(collective) if isinstance(collective, str) else "other"
        else:
            op = comm_op(name)
        nbytes = None if name.startswith("c10d::") else event_bytes(args)
        start, dur = _number(ts), _number(dur)
        if start is not None and dur is not None and dur >= 0 and (op != "other" or nbytes):
            self.comm_calls.append(CommCall(str(tid), start, start + dur, op, nbytes,
                                            process_group(args), sequence_number(args)))

    @property
    def on_gpu(self) -> bool:
        return bool(self.kernels)

    def spans(self, rank: int) -> list[Span]:
        """Typed spans of this rank on the trace's own clock (µs), step and bucket filled in."""
        cpu = _dedupe_launches(_prefer_dpviz_steps(self.cpu)) + self._whole_trace_step()
        steps = _step_windows(cpu)
        if self.on_gpu:
            return _number_buckets(_gpu_spans(cpu, self.kernels, self._launches(), steps,
                                              _CallIndex(self.comm_calls), rank), rank)
        cpu, _ = _ops_asked_for(cpu, self.c10d)
        own = any(s.kind == "step" and s.name.startswith(STEP_PREFIX) for s in cpu)
        compute = [] if own else _cpu_op_compute(self._cpu_op_times(), cpu)   # dpviz's: as recorded live
        return _number_buckets(_end_by_micro_step(cpu + compute), rank, steps)

    def _cpu_op_times(self) -> list[tuple[Any, float, float]]:
        """(thread as written, start, end) of the other CPU operators with valid times."""
        out = []
        for tid, ts, dur in self.cpu_ops:
            start, dur = _number(ts), _number(dur)
            if start is not None and dur is not None and dur >= 0:
                out.append((tid, start, start + dur))
        return out

    def _launches(self) -> dict[int, tuple[str, float]]:
        """Correlation id → (CPU thread, launch time): flow events where the trace has them,
        else the runtime call carrying the kernel's correlation id (how HTA links them)."""
        return {**self.runtime_at, **self.launch_at}

    def _gpu_notes(self, rank: int) -> list[str]:
        comm = sorted({s.tid for s, _ in self.kernels if s.kind in COMM_KINDS})
        compute = sorted({s.tid for s, _ in self.kernels if s.kind == "compute"})
        by_flow = sum(c in self.launch_at for _, c in self.kernels)
        by_corr = sum(c not in self.launch_at and c in self.runtime_at for _, c in self.kernels)
        linked, n = by_flow + by_corr, len(self.kernels)
        calls = _CallIndex(self.comm_calls)
        launches = self._launches()
        comm_kernels = [c for s, c in self.kernels if s.kind in COMM_KINDS]
        labelled = sum(c in launches and calls.find(*launches[c]) is not None for c in comm_kernels)
        out = [f"rank {rank}: GPU trace: communication kernels on {', '.join(comm) or 'no stream'}, "
               f"compute kernels on {', '.join(compute) or 'no stream'}; overlap is measured on the "
               "GPU timeline",
               f"rank {rank}: {linked} of {n} GPU events ({100 * linked / n:.0f}%) linked to their "
               f"CPU launch: {by_flow} by flow events, {by_corr} by correlation id (forward/backward/"
               "optimizer from the launching CPU op, the rest 'compute')"
               + (f"; the other {n - linked} have no launch in the trace (launched before "
                  "profiling started, or their launch was not recorded): in no step's row"
                  if 0 < linked < n
                  else "; none linked: each counts in the step it starts in, and forward/backward/"
                  "optimizer cannot be told apart (figures about them read n/a)" if not linked
                  else "")]
        if comm_kernels:
            out.append(f"rank {rank}: {labelled} of {len(comm_kernels)} communication kernels take "
                       "their op from the c10d call that launched them; the rest from the kernel's name")
        steps = _step_windows(_prefer_dpviz_steps(self.cpu))
        first = steps.starts[0] if steps.starts else None
        hta_launches = self.hta.launches   # a CPU event with the kernel's correlation id: HTA's link
        early = sum(c in hta_launches and first is not None and hta_launches[c] < first
                    for _, c in self.kernels)
        if early:
            out.append(f"rank {rank}: {HTA_DIFFERS}{early} GPU events were launched before the "
                       "first step: in no step's row here, while HTA's breakdown and overlap (the "
                       "ones shown here) count them")
        return out

    def _whole_trace_step(self) -> list[Span]:
        """A trace without step annotations is one step (figures need steps), or none if empty."""
        if any(s.kind == "step" for s in self.cpu):
            return []
        times = [t for s in self.cpu for t in (s.start_us, s.end_us)]
        times += [t for k, _ in self.kernels for t in (k.start_us, k.end_us)]
        times += [ts for _, ts in self.launch_at.values()]
        times += [ts for _, ts in self.runtime_at.values()]
        times += [t for _, start, end in self._cpu_op_times() for t in (start, end)]
        if not times:
            return []
        return [Span(rank=-1, tid="", name="whole trace", kind="step", start_us=min(times),
                     end_us=math.nextafter(max(times), math.inf))]  # the last span falls inside

    def notes(self, rank: int) -> list[str]:
        """What was inferred or skipped, in words, for the record's `notes`."""
        out = []
        if self._whole_trace_step():
            out.append(f"rank {rank}: no ProfilerStep#N annotations (profile with a schedule and "
                       "call prof.step() every iteration): the whole trace is step 0")
        if self.on_gpu:
            out += self._gpu_notes(rank)
        elif not any(s.kind == "step" and s.name.startswith(STEP_PREFIX) for s in self.cpu):
            out.append(f"rank {rank}: a CPU-only trace (no kernel or memory copy): compute here is "
                       "dpviz's own definition, the time some CPU op runs on a thread that runs "
                       "no collective")
        ran_as = [] if self.on_gpu else _ops_asked_for(self.cpu, self.c10d)[1]
        if ran_as:
            out.append(f"rank {rank}: {len(ran_as)} collectives ran as another gloo op: "
                       + ", ".join(f"{n} {asked} as {name}" for (asked, name), n
                                   in sorted(Counter(ran_as).items()))
                       + " (the c10d call says what was asked for, the gloo span what ran: on "
                       "gloo PyTorch runs a reduce-scatter as an all-reduce); they count as the "
                       "op asked for")
        if self.unknown:
            out.append(f"rank {rank}: kept {sum(self.unknown.values())} events of unknown categories "
                       f"{sorted(self.unknown)} as 'other'")
        if self.malformed:
            out.append(f"rank {rank}: skipped {self.malformed} malformed events "
                       "(not an object, or no name/ts/dur)")
        if self.phases_skipped:
            out.append(f"rank {rank}: ignored events of phase(s) {sorted(self.phases_skipped)}")
        return out


def spans_from_trace(trace: dict, rank: int) -> list[Span]:
    """Typed spans of one rank, on the trace's own clock (µs), with step and bucket filled in."""
    scan = TraceScan()
    for ev in trace["traceEvents"]:
        scan.add(ev)
    return scan.spans(rank)


def _number(value) -> float | None:
    if type(value) is float:   # most of a trace's times: the checks below, short-cut
        return value if math.isfinite(value) else None
    if type(value) is int:     # the rest (whole µs): finite unless past float's range
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:   # an integer past float's range: as malformed as an infinite time
        return None
    return value if math.isfinite(value) else None


CPU_OPS = "CPU ops"   # the name of a CPU-only trace's compute spans (dpviz's definition)


def _cpu_op_compute(ops: list[tuple[str, float, float]], cpu: list[Span]) -> list[Span]:
    """A CPU-only trace's compute: the time some CPU operator runs on a thread that runs no
    collective (gloo's worker threads run the communication), as merged "compute" spans.

    This is dpviz's definition (HTA defines compute by GPU kernels only and has no figure
    for a CPU trace); forward/backward/optimizer annotations keep their own spans beside it.
    dpviz's own traces (its step annotations) keep the live record's definition instead,
    forward/backward/optimizer only, so a run loaded back reads as it did live.
    """
    comm_threads = {s.tid for s in cpu if s.kind in COMM_KINDS}
    by_thread: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for tid, start, end in ops:
        if str(tid) not in comm_threads:
            by_thread[str(tid)].append((start, end))
    out = []
    for tid, intervals in by_thread.items():
        merged: list[list[float]] = []
        for start, end in sorted(intervals):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        out += [_span(rank=-1, tid=tid, name=CPU_OPS, kind="compute", start_us=a, end_us=b)
                for a, b in merged]
    return out


def _ops_asked_for(cpu: list[Span], c10d: list[tuple[float, str]]
                   ) -> tuple[list[Span], list[tuple[str, str]]]:
    """gloo collectives labelled with the op PyTorch asked for, and which ran as another.

    gloo runs some collectives as others: FSDP's reduce-scatter (`c10d::_reduce_scatter_base_`)
    runs as `gloo:all_reduce`. One process group runs its collectives in the order they
    were asked for, so when a trace has as many `gloo:*` spans as `c10d::*` calls and each
    pair agrees or is a known stand-in (anything run as an all-reduce), the n-th gloo span
    takes the n-th call's op (kind "collective": not one of DDP's bucket all-reduces).
    Otherwise (several groups, a cut-off window) the gloo names stand.
    """
    gloo = sorted((s for s in cpu if s.kind in COMM_KINDS and s.name.startswith("gloo:")),
                  key=lambda s: s.start_us)
    asked = [op for _, op in sorted(c10d)]
    if len(gloo) != len(asked) or any(s.op != op and s.op != "all_reduce"
                                      for s, op in zip(gloo, asked)):
        return cpu, []
    relabel = {id(s): op for s, op in zip(gloo, asked) if s.op != op}
    if not relabel:
        return cpu, []
    ran_as = [(relabel[id(s)], s.name) for s in gloo if id(s) in relabel]
    return [_with(s, op=relabel[id(s)], kind="collective") if id(s) in relabel else s
            for s in cpu], ran_as


def _prefer_dpviz_steps(spans: list[Span]) -> list[Span]:
    """dpviz's own step annotations win over ProfilerStep#N when a trace has both."""
    if any(s.kind == "step" and s.name.startswith(STEP_PREFIX) for s in spans):
        return [s for s in spans if not (s.kind == "step" and s.name.startswith(PROFILER_STEP))]
    return spans


class _Steps:
    """Step windows of one rank: which step a timestamp falls in (bisect, not a scan)."""

    def __init__(self, windows: list[tuple[float, float, int]]):
        self.windows = sorted(windows)
        self.starts = [w[0] for w in self.windows]

    def find(self, ts: float) -> int | None:
        i = bisect.bisect_right(self.starts, ts) - 1
        if i >= 0 and (ts < self.windows[i][1] or ts == self.windows[i][0]):  # [start, end), and
            return self.windows[i][2]                                          # a 0-µs step holds its start
        return None


def _step_windows(spans: list[Span]) -> _Steps:
    """Steps numbered as their annotations say (`ProfilerStep#5` → 5), else by order."""
    steps = sorted((s for s in spans if s.kind == "step"), key=lambda s: s.start_us)
    numbers = [_step_number(s.name) for s in steps]
    if None in numbers or len(set(numbers)) != len(numbers):
        numbers = list(range(len(steps)))
    return _Steps([(s.start_us, s.end_us, n) for s, n in zip(steps, numbers)])


def _step_number(name: str) -> int | None:
    match = re.search(r"#(\d+)$", name)
    return int(match.group(1)) if match else None


def _gpu_spans(cpu: list[Span], kernels: list[tuple[Span, int | None]],
               launch_at: dict[int, tuple[str, float]], steps: _Steps, calls: "_CallIndex",
               rank: int) -> list[Span]:
    """Kernels typed by the CPU op that launched them, as `rank`'s; steps and launches
    linked by correlation id (flow events, or the launch call's own id).

    A kernel belongs to the step its launch happened in (the GPU runs behind the CPU, so
    its own start may fall in the next ProfilerStep). A kernel whose launch is not in a trace
    that links the others was launched before profiling started: it belongs to no step (HTA
    drops it too). In a trace that links none, kernels go by their start.
    A communication kernel's op is the one its launching c10d call asked for (NCCL runs
    all-to-all, all-gather and more as `SendRecv` kernels); its name is the fallback.
    """
    phases = _phase_index(cpu)
    launches = [s for s in cpu if s.kind == "allreduce_launch"]
    launch_index = _PhaseIndex(_group(launches, lambda s: (s.tid, "launch")))
    # kept from the CPU side: marks, and gloo's collectives on its own threads (gloo on CUDA
    # tensors: its work, copies to and from the GPU included, is CPU time; NCCL traces have none)
    out = [_with(s, rank=rank, step=steps.find(s.start_us)) for s in cpu
           if s.kind in ("step", "micro_step", "bucket_hook", "link", "other", *COMM_KINDS)]
    launch_bytes: dict[Span, int] = {}
    any_linked = any(corr in launch_at for _, corr in kernels)
    for kernel, corr in kernels:
        where = launch_at.get(corr) if corr is not None else None
        if where is None:
            out.append(_with(kernel, rank=rank, step=None if any_linked else steps.find(kernel.start_us)))
            continue
        tid, ts = where
        kind = kernel.kind
        if kind == "compute":
            kind = next((p for p in PHASES if phases.covers((tid, p), ts)), "compute")
        elif kind in COMM_KINDS:
            if kernel.bytes is not None:
                hit = launch_index.find((tid, "launch"), ts)
                if hit is not None:
                    launch_bytes[hit] = kernel.bytes
            asked = calls.find(tid, ts)
            if asked is not None:
                out.append(_with(kernel, rank=rank, op=asked.op, step=steps.find(ts),
                                 bytes=kernel.bytes if kernel.bytes is not None else asked.bytes,
                                 group=kernel.group if kernel.group is not None else asked.group,
                                 seq=kernel.seq if kernel.seq is not None else asked.seq,
                                 kind="allreduce" if asked.op == "all_reduce" else "collective"))
                continue
        out.append(_with(kernel, rank=rank, kind=kind, step=steps.find(ts)))
    for s in launches:
        out.append(_with(s, rank=rank, step=steps.find(s.start_us),
                         bytes=s.bytes if s.bytes is not None else launch_bytes.get(s)))
    return out


class CommCall(NamedTuple):
    """A CPU op that launches a collective (a c10d call, its NCCL/gloo annotation, or
    record_param_comms), with what it says about it."""

    tid: str
    start: float
    end: float
    op: str
    bytes: int | None
    group: str | None
    seq: int | None


class _CallIndex:
    """The outermost collective-launching CPU op per thread: which op a launch at (thread,
    ts) was made for (c10d calls nest their annotations: the outer one asked), and the
    message size, process group and sequence number the first nested annotation that
    records them gives (record_param_comms, in PyTorch since 2.1)."""

    def __init__(self, calls: list[CommCall]):
        groups: dict[str, list[CommCall]] = defaultdict(list)
        for call in sorted(calls, key=lambda c: (c.start, -c.end)):
            mine = groups[call.tid]
            if mine and call.end <= mine[-1].end:    # nested in the previous outermost call
                outer = mine[-1]
                mine[-1] = outer._replace(**{
                    field: getattr(call, field) for field in ("op", "bytes", "group", "seq")
                    if getattr(outer, field) in (None, "other")})
            else:
                mine.append(call)
        self.calls = {tid: [c for c in v if c.op != "other"] for tid, v in groups.items()}
        self.starts = {tid: [c.start for c in v] for tid, v in self.calls.items()}

    def find(self, tid: str, ts: float) -> CommCall | None:
        """The call that launched at (tid, ts), or None."""
        starts = self.starts.get(tid)
        if not starts:
            return None
        i = bisect.bisect_right(starts, ts) - 1
        call = self.calls[tid][i] if i >= 0 else None
        return call if call is not None and ts < call.end else None


class _PhaseIndex:
    """Non-overlapping intervals per key, for 'which interval holds this timestamp'."""

    def __init__(self, groups: dict[tuple, list[Span]]):
        self.spans = {k: sorted(v, key=lambda s: s.start_us) for k, v in groups.items()}
        self.starts = {k: [s.start_us for s in v] for k, v in self.spans.items()}

    def find(self, key: tuple, ts: float) -> Span | None:
        starts = self.starts.get(key)
        if not starts:
            return None
        i = bisect.bisect_right(starts, ts) - 1
        span = self.spans[key][i] if i >= 0 else None
        return span if span is not None and ts < span.end_us else None

    def covers(self, key: tuple, ts: float) -> bool:
        return self.find(key, ts) is not None


def _group(spans: list[Span], key) -> dict[tuple, list[Span]]:
    groups: dict[tuple, list[Span]] = defaultdict(list)
    for s in spans:
        groups[key(s)].append(s)
    return groups


def _phase_index(cpu: list[Span]) -> _PhaseIndex:
    """Forward/backward/optimizer intervals per CPU thread, nested ones merged away."""
    groups = _group([s for s in cpu if s.kind in PHASES], lambda s: (s.tid, s.kind))
    return _PhaseIndex({k: _outermost(v) for k, v in groups.items()})


def _outermost(spans: list[Span]) -> list[Span]:
    """Drop spans lying inside an earlier one (same thread): what is left does not nest."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.start_us, -s.end_us)):
        if out and s.end_us <= out[-1].end_us:
            continue
        out.append(s)
    return out


def _end_by_micro_step(spans: list[Span]) -> list[Span]:
    """A gloo all-reduce ends, at the latest, when the micro-step that launched it ends.

    gloo's worker thread completes the work's future (waking DDP, which waits for every bucket
    before `backward()` returns, and running the comm hook's Python `then` callback, which
    needs the GIL) and only then records the end of `gloo:all_reduce` (ProcessGroupGloo's
    finishWorkGloo: the future first, then `finish`). On a busy machine that record can land
    milliseconds late, after the optimizer has started. dpviz's micro-step annotation closes
    right after `backward()` returns, so its end is a measured upper bound on every all-reduce
    it launched. Traces without micro-steps are left as is.
    """
    micro = _PhaseIndex({("micro",): sorted((s for s in spans if s.kind == "micro_step"),
                                            key=lambda s: s.start_us)})
    out = []
    for s in spans:
        window = micro.find(("micro",), s.start_us) if s.kind == "allreduce" else None
        out.append(_with(s, end_us=window.end_us)
                   if window is not None and s.end_us > window.end_us else s)
    return out


def _dedupe_launches(spans: list[Span]) -> list[Span]:
    """`nccl:all_reduce` sits inside `c10d::allreduce_`: one launch, counted once."""
    launches = _group([s for s in spans if s.kind == "allreduce_launch"], lambda s: s.tid)
    kept = {id(s) for group in launches.values() for s in _outermost(group)}
    return [s for s in spans if s.kind != "allreduce_launch" or id(s) in kept]


def _number_buckets(spans: list[Span], rank: int, steps: _Steps | None = None) -> list[Span]:
    """`spans` as `rank`'s, in `steps` (when given: a span's own step otherwise), each
    all-reduce, launch, hook and transfer with its bucket number.

    dpviz's own spans (hook, link transfer and its all-reduce) are numbered by the index in
    their name. DDP launches buckets in index order, from one thread, so launches are numbered
    in start order. Their all-reduces are too, except where sizes tell better: gloo's two worker
    threads can start two all-reduces out of launch order, so where every all-reduce and
    launch of a micro-step has its size, each all-reduce takes the number of the first
    launch of its size not yet taken (`_by_size`).
    Numbering restarts at each micro-step: a micro-step that syncs (the last one, or every
    one when no_sync is misplaced) all-reduces every bucket from index 0 again.
    """
    counters: dict[tuple, int] = defaultdict(int)
    out = []
    # (step, micro-step) → kind → positions in `out` of its launches and all-reduces
    groups: dict[tuple, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    segment = 0
    for s in sorted(spans, key=lambda s: s.start_us):
        step = steps.find(s.start_us) if steps is not None else s.step
        if s.kind == "micro_step":
            counters.clear()
            segment += 1
        if s.kind in ("allreduce_launch", "allreduce", "bucket_hook", "link") and step is not None:
            key = (s.kind, step)
            # dpviz's own spans (hook, link transfer, its all-reduce) carry the index
            named = s.kind in ("bucket_hook", "link") or s.name.startswith(LINK_ALLREDUCE_PREFIX)
            index = int(s.name.rsplit("#", 1)[1]) if named else counters[key]
            counters[key] += 1
            if s.kind in ("allreduce_launch", "allreduce") and not named:
                groups[(step, segment)][s.kind].append(len(out))
            out.append(_with(s, rank=rank, step=step, bucket=index))
        elif s.rank == rank and s.step == step:   # already so (a frozen span: no copy needed)
            out.append(s)
        else:
            out.append(_with(s, rank=rank, step=step))
    for group in groups.values():
        for position, index in _by_size([out[i] for i in group["allreduce_launch"]],
                                        group["allreduce"], out):
            out[position] = _with(out[position], bucket=index)
    return out


def _by_size(launches: list[Span], positions: list[int], out: list[Span]) -> list[tuple[int, int]]:
    """(position in `out`, bucket) of each all-reduce at `positions` (in start order) whose
    number its size gives: the first launch of that size not yet taken. None changes where
    a size is missing or the sizes of launches and all-reduces differ as multisets (then
    start order stands)."""
    reduces = [out[i] for i in positions]
    sizes = [s.bytes for s in reduces]
    if not reduces or None in sizes or sorted(sizes) != sorted(x.bytes or 0 for x in launches):
        return []
    free: dict[int, deque] = defaultdict(deque)   # size → its launches' buckets, in order
    for x in sorted(launches, key=lambda s: s.bucket):
        free[x.bytes].append(x.bucket)
    changes = []
    for position, reduce in zip(positions, reduces):
        bucket = free[reduce.bytes].popleft()
        if bucket != reduce.bucket:
            changes.append((position, bucket))
    return changes


def _with(span: Span, **changes) -> Span:
    """A copy of a (frozen) span with some fields changed, without re-running __init__
    (a GPU trace makes tens of thousands of these)."""
    new = object.__new__(Span)
    new.__dict__.update(span.__dict__, **changes)
    return new


# Span's fields in order, with their defaults (dataclasses.MISSING where required): `_span`.
_SPAN_FIELDS = {f.name: f.default for f in dataclasses.fields(Span)}


def _span(**fields) -> Span:
    """A new span, made as `_with` copies one (a frozen dataclass's `__init__` takes ~3 µs a
    span, a few hundred per slider move, tens of thousands per GPU trace); `fields` name
    every field without a default."""
    new = object.__new__(Span)
    new.__dict__.update(_SPAN_FIELDS, **fields)
    return new


def shift(spans: list[Span], origin_us: float) -> list[Span]:
    """Move spans so `origin_us` becomes 0 (all ranks share one clock: one origin for all)."""
    return [_with(s, start_us=s.start_us - origin_us, end_us=s.end_us - origin_us) for s in spans]


def merge_traces(traces: dict[int, dict]) -> dict:
    """One chrome trace with a process per rank, time-aligned (ranks share one clock)."""
    events = []
    for rank, trace in sorted(traces.items()):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                       "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for ev in trace["traceEvents"]:
            if isinstance(ev, dict) and ev.get("ph") != "M":
                events.append({**ev, "pid": rank})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_json(data: dict, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.write_text(json.dumps(data))
    return path

"""One small GPU job written in each Kineto schema generation, PyTorch 1.8 to today
(tests/test_kineto_generations.py reads them; `dpviz.analysis.scan.CATEGORY_OF` lists the
generations).

The job is the same in every file: three ProfilerSteps (#5-#7, 1000 µs each) of a DDP-like
rank — a host-to-device copy, a forward, a backward and an optimizer kernel on stream 7,
a memset, an NCCL all-reduce on stream 20 launched inside `c10d::allreduce_` — plus a kernel
launched before the first step and one whose launch is not in the trace (launched before
profiling started). The GPU runs 300 µs behind the CPU. Only the way it is written changes:
the file's top level, category names and case, flow categories and names, thread ids,
arg names, device properties, distributedInfo, the steps' GPU-side copies, and from PyTorch
2.3 syncs, collective args and µs with decimals.

    python tests/kineto_generations.py DIR   # writes DIR/<generation>/trace.json.gz
then HTA's figures for them: /path/to/hta-venv/bin/python benchmarks/hta_reference.py DIR/*
"""
from __future__ import annotations

import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path

PID, TID = 4242, 4242          # the training process and its main thread
COMM_STREAM, STREAM = 20, 7


@dataclass(frozen=True)
class Generation:
    """How one generation of Kineto writes a trace."""

    name: str
    array: bool = False            # a bare array of events, no trace object
    categories: dict | None = None  # today's category → the generation's
    flow: tuple[str, str] = ("ac2g", "ac2g")   # (category, name) of launch flows
    text_tids: bool = False        # thread ids as text, GPU rows as "stream 7"
    dims: str = "Input Dims"       # the shapes arg's name
    device_properties: str | None = None   # top-level field naming the GPUs, if any
    distributed: bool = False      # distributedInfo
    gpu_steps: str | None = None   # category of the steps' GPU-side copies, if written
    fractional: float = 0.0        # added to every ts: µs written with decimals
    newer_events: bool = False     # cuda_driver launches, cuda_sync, NCCL kernels' collective args


OLD_CATEGORIES = {"cpu_op": "Operator", "user_annotation": "Operator", "cuda_runtime": "Runtime",
                  "kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}
OLD_GPU_CATEGORIES = {"cuda_runtime": "Runtime", "kernel": "Kernel", "gpu_memcpy": "Memcpy",
                      "gpu_memset": "Memset"}
GENERATIONS = (
    Generation("pytorch-1.8-dev", array=True, categories=OLD_CATEGORIES, flow=("async", "launch"),
               text_tids=True, dims="Input dims"),
    Generation("pytorch-1.8", categories=OLD_CATEGORIES, flow=("async", "launch"), text_tids=True,
               dims="Input dims"),
    Generation("pytorch-1.9", categories=OLD_CATEGORIES, flow=("async", "launch"), text_tids=True,
               device_properties="deviceProperties"),
    Generation("pytorch-1.10", categories=OLD_GPU_CATEGORIES, flow=("async_gpu", "cudaLaunchKernel"),
               device_properties="deviceProperties", gpu_steps="gpu_user_Annotation"),
    Generation("pytorch-1.11", categories=OLD_GPU_CATEGORIES, flow=("async_cpu_to_gpu", "async_gpu"),
               device_properties="deviceProperties", distributed=True, gpu_steps="gpu_user_Annotation"),
    Generation("pytorch-1.12", flow=("async_cpu_to_gpu", "async_gpu"), distributed=True,
               device_properties="deviceProperties", gpu_steps="gpu_user_annotation"),
    Generation("pytorch-2.0", distributed=True, device_properties="deviceProperties"),
    Generation("pytorch-2.4", distributed=True, device_properties="deviceProperties",
               gpu_steps="gpu_user_annotation", fractional=0.375, newer_events=True),
)


class _Writer:
    """Events of one generation, made the way its Kineto wrote them."""

    def __init__(self, generation: Generation) -> None:
        self.g, self.events, self.next_corr = generation, [], 100

    def cat(self, today: str) -> str:
        return (self.g.categories or {}).get(today, today)

    def tid(self, thread: int, gpu: bool = False):
        if self.g.text_tids:
            return f"stream {thread}" if gpu else str(thread)
        return thread

    def ts(self, us: float) -> float:
        return us + self.g.fractional

    def cpu(self, name: str, ts: float, dur: float, cat: str = "cpu_op", **args) -> None:
        self.events.append({"ph": "X", "cat": self.cat(cat), "name": name, "pid": PID,
                            "tid": self.tid(TID), "ts": self.ts(ts), "dur": dur,
                            "args": {self.g.dims: [], "External id": len(self.events), **args}})

    def gpu(self, name: str, cat: str, start: float, dur: float, launch: float | None,
            stream: int = STREAM, call: str = "cudaLaunchKernel", **args) -> None:
        """A kernel, copy or memset, launched by `call` at `launch` (None: not in the trace)."""
        corr, self.next_corr = self.next_corr, self.next_corr + 1
        if launch is not None:
            driver = self.g.newer_events and call == "cudaLaunchKernel" and stream == STREAM
            self.cpu("cuLaunchKernel" if driver else call, launch, 4,
                     cat="cuda_driver" if driver else "cuda_runtime", cbid=211, correlation=corr)
            flow_cat, flow_name = self.g.flow
            self.events.append({"ph": "s", "id": corr, "pid": PID, "tid": TID,
                                "ts": self.ts(launch), "cat": flow_cat, "name": flow_name})
            self.events.append({"ph": "f", "id": corr, "pid": 0, "tid": self.tid(stream, gpu=True),
                                "ts": self.ts(start), "cat": flow_cat, "name": flow_name, "bp": "e"})
        self.events.append({"ph": "X", "cat": self.cat(cat), "name": name, "pid": 0,
                            "tid": self.tid(stream, gpu=True), "ts": self.ts(start), "dur": dur,
                            "args": {"device": 0, "context": 1, "stream": stream,
                                     "correlation": corr, **args}})

    def step(self, n: int, t: float) -> None:
        """ProfilerStep#n at `t`: the DDP-like work of one step."""
        self.cpu(f"ProfilerStep#{n}", t, 1000, cat="user_annotation")
        self.gpu("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", t + 100, 50, t + 20,
                 call="cudaMemcpyAsync", bytes=1 << 20)
        self.cpu("DistributedDataParallel.forward", t + 10, 200)
        self.gpu("volta_sgemm_128x64_nn", "kernel", t + 300, 250, t + 50)
        self.cpu("autograd::engine::evaluate_function: MmBackward0", t + 300, 400)
        self.gpu("volta_sgemm_128x64_nt", "kernel", t + 560, 400, t + 310)
        self.cpu("c10d::allreduce_", t + 500, 50)
        nccl = ({"Collective name": "allreduce", "In msg nelems": 1 << 18, "dtype": "Float",
                 "Process Group Name": "0", "Seq": n} if self.g.newer_events else {})
        self.gpu("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                 "kernel", t + 700, 350, t + 510, stream=COMM_STREAM, **nccl)
        self.cpu("Optimizer.step#SGD.step", t + 800, 150)
        self.gpu("Memset (Device)", "gpu_memset", t + 1055, 3, t + 805, call="cudaMemsetAsync")
        self.gpu("void multi_tensor_apply_kernel<float>(float*)", "kernel", t + 1060, 200, t + 810)
        if self.g.gpu_steps:
            self.events.append({"ph": "X", "cat": self.g.gpu_steps, "name": f"ProfilerStep#{n}",
                                "pid": 0, "tid": STREAM, "ts": self.ts(t + 100), "dur": 1160,
                                "args": {"External id": len(self.events)}})

    def sync(self, t: float) -> None:
        """PyTorch 2.3's cuda_sync: a Stream Sync row on stream 7 while the host waits."""
        corr, self.next_corr = self.next_corr, self.next_corr + 1
        self.cpu("cudaStreamSynchronize", t, 40, cat="cuda_runtime", cbid=131, correlation=corr)
        self.events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0,
                            "tid": STREAM, "ts": self.ts(t + 30), "dur": 8,
                            "args": {"cuda_sync_kind": "Stream Sync", "stream": STREAM,
                                     "correlation": corr, "device": 0, "context": 1}})


def job(generation: Generation):
    """The job in this generation's form: a list of events (a bare array) or a trace object."""
    w = _Writer(generation)
    w.gpu("void leftover_kernel<float>(float*)", "kernel", 1005, 30, launch=None)   # before profiling
    w.gpu("void warmup_kernel<float>(float*)", "kernel", 920, 40, launch=880)        # before step 5
    for i, n in enumerate((5, 6, 7)):
        w.step(n, 1000 + 1000 * i)
    if generation.newer_events:
        w.sync(2900)
    w.events.append({"ph": "X", "cat": "Trace", "ts": w.ts(800), "dur": 3500, "pid": "Traces",
                     "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}})
    w.events.append({"name": "process_name", "ph": "M", "ts": w.ts(800), "pid": PID, "tid": 0,
                     "args": {"name": "python"}})
    if generation.array:
        return w.events
    trace = {"schemaVersion": 1}
    if generation.device_properties:
        trace[generation.device_properties] = [{"id": 0, "name": "Tesla V100-SXM2-16GB",
                                                "totalGlobalMem": 16945512448}]
    if generation.distributed:
        trace["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 2}
    return trace | {"traceEvents": w.events}


def write(generation: Generation, folder: Path) -> Path:
    """`folder`/trace.json.gz in this generation's form."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(job(generation), f, indent=1)   # one field a line, as Kineto writes them
    return path


if __name__ == "__main__":
    for g in GENERATIONS:
        print(write(g, Path(sys.argv[1]) / g.name))

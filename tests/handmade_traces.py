"""Hand-built chrome traces, one rank each, for the cases real traces showed (tests/test_traces.py).

A `Rank` collects events the way PyTorch's profiler writes them: ProfilerStep annotations and
CPU ops on thread 1, `cudaLaunchKernel` runtime calls carrying a correlation id, kernels on
streams with the same id, and optionally the `ac2g` flow events that link the two.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path


class Rank:
    def __init__(self, rank: int | None = 0, world_size: int = 2, flows: bool = True):
        self.events: list[dict] = []
        self.info = None if rank is None else {"rank": rank, "world_size": world_size, "backend": "nccl"}
        self.flows, self.next_id = flows, 1000

    def cpu(self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args) -> "Rank":
        self.events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1,
                            "tid": tid, "args": args})
        return self

    def step(self, n: int, ts: float, dur: float) -> "Rank":
        return self.cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")

    def kernel(self, name: str, ts: float, dur: float, stream: int = 7, launch: float | None = None,
               **args) -> "Rank":
        """A kernel; launched at `launch` on thread 1 (None: launched before profiling, so
        its runtime call is not in the trace)."""
        corr, self.next_id = self.next_id, self.next_id + 1
        if launch is not None:
            self.cpu("cudaLaunchKernel", launch, 2, cat="cuda_runtime", correlation=corr)
            if self.flows:
                self.events += [{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "ts": launch,
                                 "pid": 1, "tid": 1},
                                {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "ts": ts,
                                 "pid": 0, "tid": stream, "bp": "e"}]
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0,
                            "tid": stream, "args": {"stream": stream, "correlation": corr, **args}})
        return self

    def write(self, path: Path) -> Path:
        data = {"schemaVersion": 1, "traceEvents": self.events}
        if self.info:
            data["distributedInfo"] = self.info
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as f:
            json.dump(data, f)
        return path


def ddp_gpu_rank(rank: int, first_step: int = 5, flows: bool = True, offset: float = 0.0,
                 steps: int = 3, world_size: int = 2) -> Rank:
    """A DDP-like GPU rank: per 1000 µs step a forward kernel, a backward kernel, an
    all-reduce launched inside c10d::allreduce_ during backward, an optimizer kernel; the
    GPU runs 300 µs behind the CPU, so a step's last kernels run in the next CPU step."""
    r = Rank(rank, world_size=world_size, flows=flows)
    for i in range(steps):
        t = offset + 1000 * i
        r.step(first_step + i, t, 1000)
        r.cpu("DistributedDataParallel.forward", t + 10, 200)
        r.kernel("volta_sgemm_fwd", t + 300, 250, launch=t + 50)
        r.cpu("autograd::engine::evaluate_function: MmBackward0", t + 300, 400)
        r.kernel("volta_sgemm_bwd", t + 560, 400, launch=t + 310)
        r.cpu("c10d::allreduce_", t + 500, 50)
        r.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", t + 700, 350 - 20 * rank, stream=20,
                 launch=t + 510)
        r.cpu("Optimizer.step#SGD.step", t + 800, 150)
        r.kernel("multi_tensor_apply_kernel", t + 1060, 200, launch=t + 810)
    return r

"""Single-process DP: `nn.DataParallel`'s algorithm with N model replicas in one process.

Step by step as `torch/nn/parallel/data_parallel.py` runs it: scatter the input batch into N
shards; replicate device 0's parameters to the others (`Broadcast`, an autograd function); run
the N forwards in N Python threads (`parallel_apply`); gather the outputs onto device 0 and
compute the loss there; one `loss.backward()` scatters the output gradient back and sums every
replica's parameter gradient onto device 0, which alone steps. `nn.DataParallel` itself needs
CUDA devices: here the replicas are copies in one address space, and every crossing of device
0's boundary is a counting copy. One difference remains: on GPUs the autograd engine runs each
device's backward on its own thread; on CPU the N replicas' backward runs on the calling thread,
one after another. Measured by `dp_vs_ddp.dp_vs_ddp` beside the rank patterns.
"""
from __future__ import annotations

import statistics
import threading

from dpviz.core.config import RunConfig, validate
from dpviz.engine import torch_gate
from dpviz.lessons.dp_vs_ddp.records import DP_PHASES, DeviceStep, WARMUP



def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def _parallel_apply(fns) -> tuple[list[threading.Thread], list[float], list]:
    """Run each fn in its own thread, as `torch.nn.parallel.parallel_apply` does (one: inline).

    Returns the thread that ran each (Thread objects: an OS ident can be reused as soon as a
    thread ends), its wall seconds and its result; re-raises the first worker's error.
    """
    import time

    import torch

    n = len(fns)
    ran, secs, results, errors = [None] * n, [0.0] * n, [None] * n, [None] * n
    grad_enabled = torch.is_grad_enabled()          # grad mode is per thread: pass it on

    def worker(i, fn):
        ran[i] = threading.current_thread()
        t0 = time.perf_counter()
        try:
            with torch.set_grad_enabled(grad_enabled):
                results[i] = fn()
        except BaseException as err:            # noqa: BLE001 — surfaced in the caller's thread
            errors[i] = err
        secs[i] = time.perf_counter() - t0

    if n == 1:
        worker(0, fns[0])
    else:
        threads = [threading.Thread(target=worker, args=(i, fn)) for i, fn in enumerate(fns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for err in errors:
        if err is not None:
            raise err
    return ran, secs, results


def _empty_threads_ms(n: int, repeats: int) -> float:
    """Median wall ms of `_parallel_apply` over n threads that do nothing: what starting and
    joining the threads costs by itself, measured apart from any forward."""
    import time

    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _parallel_apply([lambda: None] * n)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls) * 1e3


def _crossings():
    """Two autograd functions that copy a tensor across device 0's boundary and count it.

    `Out` (device 0 → a replica) is Scatter / Broadcast: its backward brings the gradient back
    to device 0, where autograd sums the replicas' contributions into the parameter's `.grad`
    (Broadcast's backward, ReduceAddCoalesced). `In` (a replica → device 0) is Gather: its
    backward scatters the output gradient back out.
    """
    import torch

    def crossing(forward_bytes: str, backward_bytes: str):
        class Crossing(torch.autograd.Function):
            @staticmethod
            def forward(ctx, dp, t):
                ctx.dp = dp
                setattr(dp, forward_bytes, getattr(dp, forward_bytes) + _nbytes(t))
                return t.clone()

            @staticmethod
            def backward(ctx, grad):
                setattr(ctx.dp, backward_bytes, getattr(ctx.dp, backward_bytes) + _nbytes(grad))
                return None, grad.clone()

        return Crossing

    return crossing("bytes_out", "bytes_in"), crossing("bytes_in", "bytes_out")


class SingleProcessDP:
    """`nn.DataParallel`'s algorithm on CPU: replica 0 is device 0, the others hold copies.

    Every tensor that crosses device 0's boundary goes through a counting autograd function,
    which adds its bytes to `bytes_out` (from device 0) or `bytes_in` (to device 0), in forward
    and in backward.
    """

    def __init__(self, cfg: RunConfig, replicas: int):
        import torch

        from dpviz.engine.workloads import build_mlp

        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        self.cfg, self.n = cfg, replicas
        self.module = build_mlp(cfg)                           # device 0: the only parameters
        self.opt = torch.optim.SGD(self.module.parameters(), lr=cfg.lr)   # device 0 only
        self.bytes_out = self.bytes_in = 0
        self._out, self._in = _crossings()

    def step(self, x, y) -> dict:
        """One training step on the batch (x, y), which lives on device 0."""
        import time

        import torch

        from dpviz.engine.workloads import loss_fn

        t0 = time.perf_counter()
        # scatter: shard 0 stays on device 0 (a view); shards 1 … N−1 are copied out
        shards = [xs if i == 0 else self._out.apply(self, xs) for i, xs in enumerate(x.chunk(self.n))]
        # replicate: device 0's parameters broadcast to every other device, in the autograd graph
        replicas = [self.module] + [
            torch_gate.replicate(self.module, {name: self._out.apply(self, p)
                                     for name, p in self.module.named_parameters()})
            for _ in range(1, self.n)]
        t1 = time.perf_counter()

        def forward(i):
            return replicas[i](shards[i])

        ran, secs, outputs = _parallel_apply([lambda i=i: forward(i) for i in range(self.n)])
        t2 = time.perf_counter()
        # gather: the outputs onto device 0; the loss there, against targets that never moved
        gathered = torch.cat([o if i == 0 else self._in.apply(self, o) for i, o in enumerate(outputs)])
        loss = loss_fn(gathered, y)
        t3 = time.perf_counter()
        loss.backward()           # output grads scattered out, parameter grads summed on device 0
        t4 = time.perf_counter()
        self.opt.step()                                   # the only optimizer step
        self.opt.zero_grad(set_to_none=True)
        t5 = time.perf_counter()
        parallel = t2 - t1
        return dict(step=t5 - t0, threads=len({id(t) for t in ran}),
                    overlap=sum(secs) / parallel if parallel > 0 else 1.0,
                    phases=dict(zip(DP_PHASES, (t1 - t0, parallel, t3 - t2, t4 - t3, t5 - t4))))

    def flat(self):
        from dpviz.engine.workloads import flat_params

        return flat_params(self.module)


def data_parallel(cfg: RunConfig, replicas: int, steps: int,
                  warmup: int = WARMUP) -> tuple[DeviceStep, object]:
    """Train single-process DP with `replicas` devices: `warmup` untimed steps, then `steps`.

    Each replica takes `cfg.batch_per_rank` samples (the global batch grows with N, as the rank
    patterns' does). Torch's intra-op pool is set to one thread meanwhile, as on every rank: the
    only parallelism is the N forward threads. Returns the measurements and device 0's final
    flat parameters; the parameters are checked against one process training on the whole batch.
    """
    import torch

    from dpviz.core.rounding import max_abs, sgd_bound
    from dpviz.engine.workloads import build_mlp, flat_params, global_batch, single_process_params

    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got {steps} and {warmup}")
    cfg = validate(cfg).replace(world_size=replicas, steps=warmup + steps)
    dp = SingleProcessDP(cfg, replicas)
    stats, intra_op = [], torch.get_num_threads()
    torch.set_num_threads(1)          # one compute thread per replica, as each rank has one
    try:
        with torch.enable_grad():
            for step in range(warmup + steps):
                x, y = global_batch(cfg, step, 0)
                before = dp.bytes_out, dp.bytes_in
                s = dp.step(x, y)
                s["out"], s["in"] = dp.bytes_out - before[0], dp.bytes_in - before[1]
                stats.append(s)
        # the reference with the same single intra-op thread: at N = 1 both run the very same
        # kernels on the same numbers, so they agree bit for bit on any CPU
        reference = single_process_params(cfg)
        single = reference[-1]
    finally:
        torch.set_num_threads(intra_op)
    final = dp.flat()
    measured = stats[warmup:]
    return DeviceStep(
        replicas=replicas,
        step_ms=statistics.median(s["step"] for s in measured) * 1e3,
        phase_ms={k: statistics.median(s["phases"][k] for s in measured) * 1e3 for k in DP_PHASES},
        bytes_out=statistics.mean(s["out"] for s in stats),
        bytes_in=statistics.mean(s["in"] for s in stats),
        threads=max(s["threads"] for s in stats),
        overlap=statistics.median(s["overlap"] for s in measured),
        empty_threads_ms=_empty_threads_ms(replicas, repeats=max(5, steps)),
        max_diff_vs_single=float((final - single).abs().max()),
        rounding_bound=0.0 if replicas == 1 else
        sgd_bound(cfg, max_abs([flat_params(build_mlp(cfg)), *reference])),
    ), final

"""DP vs DDP: one process over N devices, a parameter server on ranks, and DDP's all-reduce.

Three ways to train one model on N workers, same model, same batches, same result:

* **dp** — `nn.DataParallel`'s algorithm in one process with N model replicas (the "devices"),
  step by step as `torch/nn/parallel/data_parallel.py` runs it: scatter the input batch into N
  shards; replicate device 0's parameters to the others (`Broadcast`, an autograd function);
  run the N **forwards** in N Python threads (`parallel_apply`); gather the outputs onto device 0
  (`Gather`) and compute the loss there, against targets that never left device 0; then one
  `loss.backward()`: the gather's backward scatters the output gradient back to the replicas,
  each replica's backward runs, and the broadcast's backward sums every replica's parameter
  gradient onto device 0's parameters (`ReduceAddCoalesced`); device 0 alone steps.
  `nn.DataParallel` itself needs CUDA devices. Here the replicas are copies in one address
  space and each of those four autograd functions is a counting copy: every byte that crosses
  device 0's boundary is added up by direction. One difference remains: on GPUs the autograd
  engine runs each device's backward on its own thread; on CPU the N replicas' backward runs
  on the calling thread, one after another.
* **ps** — a parameter server on ranks: rank 0 receives every rank's gradient, steps the only
  optimizer and sends the parameters back (DataParallel's data flow, spread over processes).
* **ddp** — DDP: the gradients are all-reduced and every rank steps its own optimizer.

Rank traffic is *measured*, not counted: the bytes this rank's process wrote to its sockets
during a step (`wchar` of /proc/self/io; gloo sends with write calls, nothing else writes
then). Only sent bytes are visible this way; what a rank receives mirrors what the others send.
World sizes 2 … N are measured on subgroups of one warm N-rank cluster.
"""
from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass

from .config import RunConfig, validate
from .launch import Cluster, RankContext
from .record import record_kind

PATTERNS = ("dp", "ps", "ddp")       # single-process DP, parameter server on ranks, DDP
RANK_PATTERNS = ("ps", "ddp")        # the two that run on ranks and send over sockets
DP_PHASES = ("scatter_replicate", "parallel_forward", "gather_loss", "backward", "update")
WARMUP = 2                           # untimed steps before the measured ones, in every pattern


@dataclass(frozen=True)
class StepTraffic:
    """One rank, one rank pattern, one world size: median step time and bytes it sent per step."""

    pattern: str            # "ps" (gradients to rank 0, update, send back) or "ddp" (all-reduce)
    world_size: int
    rank: int
    step_ms: float          # median over the measured steps (wall clock, under load here)
    sent_bytes: float       # mean bytes written to sockets per step


@dataclass(frozen=True)
class DeviceStep:
    """Single-process DP with N replicas ("devices"): one process, N threads, replica 0 updates."""

    replicas: int
    step_ms: float                   # median wall time of a step (after one warm-up step)
    phase_ms: dict[str, float]       # median per phase, keys DP_PHASES
    bytes_out: float                 # out of device 0 per step: shards, parameters, output grads
    bytes_in: float                  # into device 0 per step: outputs, parameter gradients
    threads: int                     # distinct threads that ran the forwards in one step
    overlap: float                   # Σ replica forward time / parallel_forward wall (1 = serial)
    max_diff_vs_single: float        # max |θ_dp − θ_one process on the whole batch| at the end
    max_diff_vs_ddp: float | None = None   # max |θ_dp − θ_ddp| (None: DDP not run at this N)
    rounding_bound: float | None = None    # what float32 re-ordering can reach (0 exact at N = 1)
    empty_threads_ms: float = 0.0    # median wall time to start and join N threads that do nothing


@record_kind("dp_vs_ddp")
@dataclass(frozen=True)
class DpVsDdp:
    """The three patterns at several sizes, with the checks that they train identically."""

    config: dict
    param_bytes: int                     # P: one full gradient or parameter copy
    shard_bytes: int                     # one replica's input shard (x; targets stay on device 0)
    points: tuple[StepTraffic, ...]      # the rank patterns, per world size and rank
    max_param_diff: dict[int, float]     # world size → max |θ_ps − θ_ddp| after training
    single_process: tuple[DeviceStep, ...] = ()   # single-process DP, per replica count
    output_bytes: int = 0                # one replica's output shard (gathered, its grad scattered)

    def of(self, pattern: str, world_size: int | None = None) -> list[StepTraffic]:
        return [p for p in self.points if p.pattern == pattern
                and (world_size is None or p.world_size == world_size)]

    def dp(self, replicas: int) -> DeviceStep:
        return next(d for d in self.single_process if d.replicas == replicas)


def expected_sent_bytes(pattern: str, world_size: int, rank: int, param_bytes: int) -> float:
    """The model: the server (rank 0) sends N−1 parameter copies; a ring all-reduce 2(N−1)/N·P."""
    if pattern == "ps":
        return float((world_size - 1) * param_bytes if rank == 0 else param_bytes)
    if pattern == "ddp":
        return 2 * (world_size - 1) / world_size * param_bytes
    hint = "; single-process DP sends nothing: see expected_copy_bytes" if pattern == "dp" else ""
    raise ValueError(f"pattern must be one of {RANK_PATTERNS}, got {pattern!r}{hint}")


def expected_copy_bytes(replicas: int, param_bytes: int, shard_bytes: int,
                        output_bytes: int) -> dict[str, float]:
    """What nn.DataParallel moves through device 0 per step, by direction (N = replicas).

    out: N−1 input shards (scatter), N−1 parameter copies (replicate) and, in backward, N−1
    output-gradient shards (the gather's backward); in: N−1 output shards (gather) and, in
    backward, N−1 parameter gradients (the broadcast's backward, summed on device 0).
    """
    n = replicas - 1
    return {"out": float(n * (shard_bytes + param_bytes + output_bytes)),
            "in": float(n * (output_bytes + param_bytes))}


# --- single-process DP: nn.DataParallel's algorithm, N replicas, one process -------------------

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


def _replicate(module, params: dict):
    """A replica of `module` computing with `params` (name → tensor, non-leaf: the broadcast
    copies), built as `torch.nn.parallel.replicate` builds one: a shallow copy of every
    submodule without parameters of its own, the copies set as plain attributes."""
    subs = dict(module.named_modules())
    copies = {name: m._replicate_for_data_parallel() for name, m in subs.items()}
    for name, m in subs.items():
        prefix = f"{name}." if name else ""
        for key, child in m._modules.items():
            copies[name]._modules[key] = None if child is None else copies[prefix + key]
        for key in m._parameters:
            setattr(copies[name], key, params[prefix + key])
    return copies[""]


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

        from .workloads import build_mlp

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

        from .workloads import loss_fn

        t0 = time.perf_counter()
        # scatter: shard 0 stays on device 0 (a view); shards 1 … N−1 are copied out
        shards = [xs if i == 0 else self._out.apply(self, xs) for i, xs in enumerate(x.chunk(self.n))]
        # replicate: device 0's parameters broadcast to every other device, in the autograd graph
        replicas = [self.module] + [
            _replicate(self.module, {name: self._out.apply(self, p)
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
        from .workloads import flat_params

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

    from .rounding import max_abs, sgd_bound
    from .workloads import build_mlp, flat_params, global_batch, single_process_params

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


# --- the rank patterns: parameter server and DDP ---------------------------------------------

def _sent_bytes() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("wchar:")).split()[1])


def _ps_step(rank: int, world: int, group, model, opt, x, y) -> None:
    """Parameter server: gradient to rank 0, rank 0 averages and updates, parameters back."""
    import torch
    import torch.distributed as dist
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    from .workloads import loss_fn

    loss_fn(model(x), y).backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    if rank == 0:
        inbox = [torch.empty_like(grad) for _ in range(1, world)]
        for work in [dist.irecv(buf, src, group=group) for src, buf in enumerate(inbox, start=1)]:
            work.wait()
        total = grad + sum(inbox)
        vector_to_parameters(total / world, [p.grad for p in model.parameters()])
        opt.step()                                     # the only optimizer step in the job
        params = parameters_to_vector(model.parameters()).detach()
        for work in [dist.isend(params, dst, group=group) for dst in range(1, world)]:
            work.wait()
    else:
        dist.send(grad, 0, group=group)
        params = torch.empty_like(grad)
        dist.recv(params, 0, group=group)
        with torch.no_grad():
            vector_to_parameters(params, model.parameters())
    model.zero_grad(set_to_none=True)


def _ddp_step(ddp, opt, x, y) -> None:
    from .workloads import loss_fn

    loss_fn(ddp(x), y).backward()                      # all-reduce of the buckets happens here
    opt.step()
    opt.zero_grad(set_to_none=True)


def _measure_group(rank: int, world: int, group, cfg: RunConfig, steps: int) -> dict:
    """Both rank patterns on the first `world` ranks (group ranks = global ranks 0 … world − 1)."""
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.nn.utils import parameters_to_vector

    from .workloads import build_mlp, rank_batch

    cfg = cfg.replace(world_size=world)                # each rank's slice of the global batch
    out, final = {}, {}
    for pattern in RANK_PATTERNS:
        model = build_mlp(cfg)
        net = (DDP(model, bucket_cap_mb=cfg.bucket_cap_mb, process_group=group)
               if pattern == "ddp" else model)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        ms, sent = [], []
        for step in range(WARMUP + steps):             # warm-up first (DDP rebuilds buckets)
            x, y = rank_batch(cfg, step, 0, rank)
            dist.barrier(group=group)                  # every rank starts the step together
            w0, t0 = _sent_bytes(), time.perf_counter()
            if pattern == "ps":
                _ps_step(rank, world, group, model, opt, x, y)
            else:
                _ddp_step(net, opt, x, y)
            t1, w1 = time.perf_counter(), _sent_bytes()
            if step >= WARMUP:
                ms.append((t1 - t0) * 1e3)
                sent.append(w1 - w0)
        out[pattern] = dict(step_ms=statistics.median(ms), sent_bytes=statistics.mean(sent))
        final[pattern] = parameters_to_vector(model.parameters()).detach()
    res = dict(patterns=out, max_param_diff=float((final["ps"] - final["ddp"]).abs().max()),
               param_bytes=int(final["ddp"].numel() * final["ddp"].element_size()))
    if rank == 0:                                      # DDP's parameters, for the DP comparison
        res["ddp_params"] = final["ddp"].numpy().tobytes()
    return res


def dp_vs_ddp_rank(ctx: RankContext, cfg: RunConfig, steps: int, world_sizes) -> dict:
    """For each world size n, ranks 0 … n−1 train both rank patterns; the others wait.

    One warm cluster of max(world_sizes) ranks serves every n through a process subgroup, so
    no ranks are started per point.
    """
    import torch.distributed as dist

    out = {}
    for n in world_sizes:
        group = dist.new_group(list(range(n)))         # collective: every rank creates it
        if ctx.rank < n:
            out[n] = _measure_group(ctx.rank, n, group, cfg, steps)
        dist.barrier()
        dist.destroy_process_group(group)
    return out


def dp_vs_ddp(cluster: Cluster, world_sizes=(2, 3, 4), cfg: RunConfig | None = None,
              steps: int = 4, replicas=(1, 2, 3, 4)) -> DpVsDdp:
    """Measure the rank patterns at each world size on subgroups of the cluster's ranks, and
    single-process DP in this process at each replica count; check all three train alike."""
    import torch

    cfg = validate(cfg or RunConfig(layers=2, width=512, batch_per_rank=16))
    world_sizes, replicas = tuple(world_sizes), tuple(replicas)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not world_sizes or min(world_sizes) < 2 or max(world_sizes) > cluster.world_size:
        raise ValueError(f"world sizes must be between 2 and the cluster's {cluster.world_size} "
                         f"ranks, got {list(world_sizes)}: start a larger Cluster")
    if any(r < 1 for r in replicas):
        raise ValueError(f"replica counts must be >= 1, got {list(replicas)}")
    res = cluster.run_task(dp_vs_ddp_rank, cfg, steps, world_sizes)
    points = [StepTraffic(pattern=p, world_size=n, rank=r, **res[r][n]["patterns"][p])
              for n in world_sizes for p in RANK_PATTERNS for r in range(n)]
    devices = []
    for n in replicas:
        dev, final = data_parallel(cfg, n, steps)
        if n in world_sizes:
            ddp = torch.frombuffer(bytearray(res[0][n]["ddp_params"]), dtype=final.dtype)
            dev = DeviceStep(**{**dev.__dict__,
                                "max_diff_vs_ddp": float((final - ddp).abs().max())})
        devices.append(dev)
    return DpVsDdp(config=cfg.to_dict(), param_bytes=res[0][world_sizes[0]]["param_bytes"],
                   shard_bytes=cfg.batch_per_rank * cfg.width * 4,
                   output_bytes=cfg.batch_per_rank * 1 * 4,        # the MLP's head: one float
                   points=tuple(points),
                   max_param_diff={n: max(res[r][n]["max_param_diff"] for r in range(n))
                                   for n in world_sizes},
                   single_process=tuple(devices))

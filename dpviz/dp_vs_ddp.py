"""DP vs DDP: one process over N devices, a parameter server on ranks, and DDP's all-reduce.

Three ways to train one model on N workers, same model, same batches, same result:

* **dp** — single-process data parallel, the way `nn.DataParallel` works: ONE process holds N
  model replicas (the "devices"). Every step it scatters the batch into N shards, copies the
  parameters from replica 0 to the others (`replicate`), runs the replicas' forward+backward in
  N Python threads (`parallel_apply`; torch releases the GIL inside ops), copies every gradient
  back to replica 0 and sums it there, and updates replica 0 only. `nn.DataParallel` needs CUDA
  devices; on CPU the replicas are plain copies in one address space, and every byte that
  crosses replica 0's boundary goes through a counted `copy_`, by direction.
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
DP_PHASES = ("scatter_replicate", "parallel_apply", "gather", "update")
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
    bytes_out: float                 # copied out of replica 0 per step (batch shards, parameters)
    bytes_in: float                  # copied into replica 0 per step (gradients)
    threads: int                     # distinct threads that ran forward+backward in one step
    overlap: float                   # Σ replica fwd+bwd time / parallel_apply wall (1 = serial)
    max_diff_vs_single: float        # max |θ_dp − θ_one process on the whole batch| at the end
    max_diff_vs_ddp: float | None = None   # max |θ_dp − θ_ddp| (None: DDP not run at this N)
    rounding_bound: float | None = None    # what float32 re-ordering can reach (0 exact at N = 1)


@record_kind("dp_vs_ddp")
@dataclass(frozen=True)
class DpVsDdp:
    """The three patterns at several sizes, with the checks that they train identically."""

    config: dict
    param_bytes: int                     # P: one full gradient or parameter copy
    shard_bytes: int                     # one replica's input shard (x and y) in single-process DP
    points: tuple[StepTraffic, ...]      # the rank patterns, per world size and rank
    max_param_diff: dict[int, float]     # world size → max |θ_ps − θ_ddp| after training
    single_process: tuple[DeviceStep, ...] = ()   # single-process DP, per replica count

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


def expected_copy_bytes(replicas: int, param_bytes: int, shard_bytes: int) -> dict[str, float]:
    """What single-process DP copies through replica 0 per step, by direction.

    out: N−1 input shards and N−1 parameter copies (replicate); in: N−1 gradients (gather).
    """
    return {"out": float((replicas - 1) * (param_bytes + shard_bytes)),
            "in": float((replicas - 1) * param_bytes)}


# --- single-process DP: N replicas, N threads, one process ------------------------------------

def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def _parallel_apply(fns) -> tuple[list[threading.Thread], list[float]]:
    """Run each fn in its own thread, as `torch.nn.parallel.parallel_apply` does (one: inline).

    Returns the thread that ran each (Thread objects: an OS ident can be reused as soon as a
    thread ends) and its wall seconds; re-raises the first worker's error.
    """
    import time

    ran, secs, errors = [None] * len(fns), [0.0] * len(fns), [None] * len(fns)

    def worker(i, fn):
        ran[i] = threading.current_thread()
        t0 = time.perf_counter()
        try:
            fn()
        except BaseException as err:            # noqa: BLE001 — surfaced in the caller's thread
            errors[i] = err
        secs[i] = time.perf_counter() - t0

    if len(fns) == 1:
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
    return ran, secs


class SingleProcessDP:
    """`nn.DataParallel`'s data flow on CPU: replica 0 is device 0; the others are copies.

    Every tensor that crosses replica 0's boundary goes through `_copy`, which adds its bytes
    to `bytes_out` (from replica 0) or `bytes_in` (to replica 0).
    """

    def __init__(self, cfg: RunConfig, replicas: int):
        import torch

        from .workloads import build_mlp

        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        self.cfg, self.n = cfg, replicas
        self.replicas = [build_mlp(cfg) for _ in range(replicas)]   # storage on each "device"
        self.params = [list(m.parameters()) for m in self.replicas]
        self.opt = torch.optim.SGD(self.replicas[0].parameters(), lr=cfg.lr)  # device 0 only
        self.staging = [torch.empty_like(p) for p in self.params[0]]  # gradients land here
        self.bytes_out = self.bytes_in = 0

    def _copy(self, dst, src, direction: str):
        dst.copy_(src)
        if direction == "out":
            self.bytes_out += _nbytes(src)
        else:
            self.bytes_in += _nbytes(src)
        return dst

    def step(self, x, y) -> dict:
        """One training step on the batch (x, y), which lives on replica 0."""
        import time

        import torch

        from .workloads import loss_fn

        t0 = time.perf_counter()
        with torch.no_grad():
            # scatter: shard 0 stays on device 0 (a view); shards 1 … N−1 are copied out
            shards = []
            for i, (xs, ys) in enumerate(zip(x.chunk(self.n), y.chunk(self.n))):
                if i:
                    xs = self._copy(torch.empty_like(xs), xs, "out")
                    ys = self._copy(torch.empty_like(ys), ys, "out")
                shards.append((xs, ys))
            # replicate: replica 0's parameters copied to every other replica
            for i in range(1, self.n):
                for dst, src in zip(self.params[i], self.params[0]):
                    self._copy(dst, src, "out")
        t1 = time.perf_counter()

        batch = x.shape[0]

        def fwd_bwd(i):
            xs, ys = shards[i]
            # mean over the shard × shard/batch: the replicas' losses sum to the batch's mean loss
            (loss_fn(self.replicas[i](xs), ys) * (xs.shape[0] / batch)).backward()

        ran, secs = _parallel_apply([lambda i=i: fwd_bwd(i) for i in range(self.n)])
        t2 = time.perf_counter()
        with torch.no_grad():
            # gather: every other replica's gradient copied to device 0, summed into its own
            for i in range(1, self.n):
                for buf, p0, pi in zip(self.staging, self.params[0], self.params[i]):
                    p0.grad.add_(self._copy(buf, pi.grad, "in"))
        t3 = time.perf_counter()
        self.opt.step()                                   # the only optimizer step
        for m in self.replicas:
            m.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        parallel = t2 - t1
        return dict(step=t4 - t0, threads=len({id(t) for t in ran}),
                    overlap=sum(secs) / parallel if parallel > 0 else 1.0,
                    phases=dict(zip(DP_PHASES, (t1 - t0, parallel, t3 - t2, t4 - t3))))

    def flat(self):
        from .workloads import flat_params

        return flat_params(self.replicas[0])


def data_parallel(cfg: RunConfig, replicas: int, steps: int,
                  warmup: int = WARMUP) -> tuple[DeviceStep, object]:
    """Train single-process DP with `replicas` devices: `warmup` untimed steps, then `steps`.

    Each replica takes `cfg.batch_per_rank` samples (the global batch grows with N, as the rank
    patterns' does). Torch's intra-op pool is set to one thread meanwhile, as on every rank: the
    only parallelism is the N replica threads. Returns the measurements and replica 0's final flat parameters; the
    parameters are checked against one process training on the whole batch.
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
                   shard_bytes=cfg.batch_per_rank * (cfg.width + 1) * 4,
                   points=tuple(points),
                   max_param_diff={n: max(res[r][n]["max_param_diff"] for r in range(n))
                                   for n in world_sizes},
                   single_process=tuple(devices))

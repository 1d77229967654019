"""DP vs DDP, the record: what single-process DP, a parameter server and DDP measured, and the
byte model each is checked against. No torch: it saves, loads and renders without ranks.

How the three patterns run, and how their traffic is measured: `dp_vs_ddp.py`.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpviz.core.record import record_kind

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
    step_ms: float          # median over the measured steps (wall clock: whatever shares the cores inflates it)
    sent_bytes: float       # mean bytes written to sockets per step
    # ddp: the same step with nothing communicated, on the same ranks at once (median ms): the
    # rest of DDP's step is what its all-reduces cost here, waiting for peers included
    compute_ms: float | None = None


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


def describe_time(record: DpVsDdp, world_size: int) -> str:
    """Why the step times order as they do at one N, from the parts measured: DDP's step is
    its compute alone plus what its all-reduces add; DP's is its forwards and backward plus
    device 0's own work (scatter, replicate, gather and loss, update). Where DDP is slower the
    verdict names each part in which it loses: at least one, as both sides add up by construction
    (each remainder is the step less the part measured)."""
    dp, ddp = record.dp(world_size), max(record.of("ddp", world_size), key=lambda p: p.step_ms)
    if ddp.compute_ms is None:
        raise ValueError("this record has no DDP compute-alone time: record it again")
    d0 = sum(dp.phase_ms[k] for k in ("scatter_replicate", "gather_loss", "update"))
    dp_compute, added = dp.step_ms - d0, ddp.step_ms - ddp.compute_ms
    line = (f"N={world_size}: DDP {ddp.step_ms:.1f} ms = compute alone {ddp.compute_ms:.1f} + "
            f"{added:.1f} its all-reduces add (slowest rank); DP {dp.step_ms:.1f} ms = forwards and "
            f"backward {dp_compute:.1f} + device 0's own work {d0:.1f}")
    if ddp.step_ms <= dp.step_ms:
        return line
    parts = ([f"its compute alone takes {ddp.compute_ms - dp_compute:.1f} ms longer than DP's "
              f"({world_size} processes share the cores)"] if ddp.compute_ms > dp_compute else [])
    parts += ([f"its all-reduces over loopback sockets add {added:.1f} ms, more than DP's device 0 "
               f"spends ({d0:.1f} ms: in one process DP's copies are memory copies)"] if added > d0 else [])
    return line + "\n  measured: DDP is slower here: " + "; and ".join(parts)

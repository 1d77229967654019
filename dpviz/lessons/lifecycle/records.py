"""The DDP lifecycle's records: who a rank is, the shards a sampler draws, one DDP life from
construction to checkpoint. No torch: they save, load and render without ranks.

`torchrun_layout` is here too: how torchrun numbers ranks is arithmetic, not a run.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpviz.core.record import record_kind
from dpviz.core.workloads import WorkloadInfo

# --- 1. rank, local rank, world size ---------------------------------------------------------


@dataclass(frozen=True)
class RankIdentity:
    """The numbers a rank uses to pick its data, its device and whether it writes files."""

    rank: int               # global rank: 0 … world_size − 1, unique in the job
    world_size: int         # all ranks of the job, on every node
    local_rank: int         # index among the ranks on the same host (picks the GPU)
    local_world_size: int   # ranks on this host
    host: str
    pid: int


def torchrun_layout(nnodes: int, nproc_per_node: int) -> list[RankIdentity]:
    """How torchrun numbers ranks across nodes: rank = node · nproc_per_node + local_rank."""
    if nnodes < 1 or nproc_per_node < 1:
        raise ValueError(f"need at least 1 node and 1 process per node, got {nnodes} × {nproc_per_node}")
    world = nnodes * nproc_per_node
    return [RankIdentity(rank=node * nproc_per_node + local, world_size=world, local_rank=local,
                         local_world_size=nproc_per_node, host=f"node{node}", pid=0)
            for node in range(nnodes) for local in range(nproc_per_node)]


# --- 2. DistributedSampler ---------------------------------------------------------------------


@record_kind("sampler_shards")
@dataclass(frozen=True)
class SamplerShards:
    """`shards[epoch][rank]`: the dataset indices that rank visits in that epoch, in order."""

    dataset_size: int
    world_size: int
    shuffle: bool
    drop_last: bool
    set_epoch: bool                              # False: the same order every epoch
    shards: tuple[tuple[tuple[int, ...], ...], ...]

    def padding(self, epoch: int = 0) -> int:
        """Indices drawn twice so every rank gets the same count (drop_last=False)."""
        drawn = [i for shard in self.shards[epoch] for i in shard]
        return len(drawn) - len(set(drawn))


# --- 3. construction broadcast, buffers, save on rank 0 -----------------------------------------


BN_NET = "bn_net"   # the lifecycle's own net (no cfg): BatchNorm1d on the raw inputs, two Linears


@record_kind("ddp_lifecycle")
@dataclass(frozen=True)
class Lifecycle:
    """One DDP life on every rank, from different starting weights to a checkpoint."""

    forward_sync_buffers: bool
    data_shift: float                                  # rank r's float inputs are shifted by r · shift
    weights_before: tuple[tuple[float, ...], ...]      # [rank]: first weights of the first matrix, before DDP
    weights_after: tuple[tuple[float, ...], ...]       # [rank]: the same weights after DDP(...)
    param_diff_before: float                           # max |θ_r − θ_0| over ranks, before DDP
    param_diff_after: float                            # ... right after DDP's constructor
    buffer_diff_before: float | None                   # same for buffers (None: the model has none)
    buffer_diff_after: float | None
    running_mean: tuple[tuple[float, ...], ...]        # [rank][step]: first BatchNorm's mean running_mean
    saved_by: tuple[int, ...]                          # ranks that wrote the checkpoint
    checkpoint_bytes: int
    checkpoint_keys: tuple[str, ...]
    load_param_diff: tuple[float, ...]                 # [rank]: max |loaded − own| parameters
    load_buffer_diff: tuple[float, ...]                # [rank]: max |loaded − own| buffers (() if none)
    # [step]: max |buffer_r − buffer_0| over ranks of the buffers each forward starts from
    # (after DDP's pre-forward broadcast, before BatchNorm updates them); () without buffers
    buffer_diff_at_forward: tuple[float, ...] = ()
    workload: WorkloadInfo | None = None               # name BN_NET without a cfg

    @property
    def has_buffers(self) -> bool:
        """Whether the model has buffers for DDP to broadcast (from the run, not the name)."""
        return self.buffer_diff_before is not None

"""The training workload every live run uses: a deep MLP on synthetic regression data.

Data is a pure function of (seed, step, micro_step): every rank can rebuild the *global*
batch and take its own slice, and a single process can rebuild the concatenated batch —
which is how the DDP = large-batch SGD claim is checked.
"""
from __future__ import annotations

import torch
from torch import nn

from .config import RunConfig


class MLP(nn.Sequential):
    """Linear+ReLU blocks then a Linear head; with `checkpoint_every = k`, each run of k
    blocks keeps only its input during forward and recomputes the rest in backward."""

    def __init__(self, *modules: nn.Module, checkpoint_every: int = 0):
        super().__init__(*modules)
        self.checkpoint_every = checkpoint_every

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.checkpoint_every:
            return super().forward(x)
        from torch.utils.checkpoint import checkpoint

        mods, span = list(self), 2 * self.checkpoint_every  # 2 modules per block
        for i in range(0, len(mods) - 1, span):
            segment = nn.Sequential(*mods[i:min(i + span, len(mods) - 1)])
            x = checkpoint(segment, x, use_reentrant=False)
        return mods[-1](x)


def build_mlp(cfg: RunConfig) -> MLP:
    """`layers` blocks of Linear+ReLU and a Linear head; same weights for a given seed."""
    torch.manual_seed(cfg.seed)
    blocks: list[nn.Module] = []
    for _ in range(cfg.layers):
        blocks += [nn.Linear(cfg.width, cfg.width), nn.ReLU()]
    blocks.append(nn.Linear(cfg.width, 1))
    return MLP(*blocks, checkpoint_every=cfg.checkpoint_every)


def global_batch(cfg: RunConfig, step: int, micro_step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All ranks' samples for one micro-step, (world·batch, width) and (world·batch, 1)."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step * 1009 + micro_step)
    n = cfg.world_size * cfg.batch_per_rank
    x = torch.randn(n, cfg.width, generator=gen)
    teacher = torch.randn(cfg.width, 1, generator=torch.Generator().manual_seed(cfg.seed + 7))
    y = torch.tanh(x @ teacher / cfg.width ** 0.5)
    return x, y


def rank_batch(cfg: RunConfig, step: int, micro_step: int, rank: int):
    """This rank's contiguous slice of the global batch.

    `DistributedSampler` strides instead (rank r takes indices r, r + N, … of its order, padded
    to equal shards). With equal shards and a mean loss, the averaged gradient is the global
    batch's mean whatever the split, so the contiguous slice trains the same and is easier to
    read.
    """
    x, y = global_batch(cfg, step, micro_step)
    lo, hi = rank * cfg.batch_per_rank, (rank + 1) * cfg.batch_per_rank
    return x[lo:hi], y[lo:hi]


def loss_fn(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(pred, target)


def single_process_params(cfg: RunConfig) -> list[torch.Tensor]:
    """Train one process on the concatenated batches; flat parameters after each step.

    Same model, same optimizer, loss scaled by 1/accum_steps: the large-batch SGD that DDP
    with accumulation must equal (a run with `scale_loss=False` is compared against it too).
    """
    model = build_mlp(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    after = []
    for step in range(cfg.steps):
        for micro in range(cfg.accum_steps):
            x, y = global_batch(cfg, step, micro)
            (loss_fn(model(x), y) / cfg.accum_steps).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        after.append(flat_params(model))
    return after


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()

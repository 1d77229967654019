"""Factories for `--model MODULE:FUNCTION` in tests (ranks import this module by name)."""
from __future__ import annotations


def tied_gpt():
    """The built-in GPT with its head tied to the token embedding (nanoGPT's choice)."""
    import dataclasses

    from dpviz.core.config import RunConfig
    from dpviz.engine.workloads import build_gpt

    return dataclasses.replace(build_gpt(RunConfig(model="gpt"), tie_head=True), name="tied_gpt")


def rank_seeded_mlp():
    """dpviz's MLP with different initial weights on every rank (a user's model built without
    a common seed): DDP's start-up sync must make them rank 0's."""
    import torch
    import torch.distributed as dist

    from dpviz.core.config import RunConfig
    from dpviz.engine.workloads import Workload, build_mlp, loss_fn, mlp_batch

    cfg = RunConfig(layers=2, width=32)
    model = build_mlp(cfg.replace(seed=dist.get_rank() if dist.is_initialized() else 0))
    torch.manual_seed(0)
    return Workload(model, mlp_batch(cfg), loss_fn, "rank_seeded_mlp")

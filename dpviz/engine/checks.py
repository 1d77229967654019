"""The run's checks, on the rank: DDP's central claim, tested after every step.

After each step every rank's parameters are gathered on rank 0 and compared with each other
(equal bit for bit: every rank applies the same all-reduced gradient) and with one process
trained on the concatenated batch (equal up to float32 rounding, whose bound is printed
beside the gap: `dpviz.core.rounding`). They run after profiling, so their collectives stay out
of the trace.
"""
from __future__ import annotations

import functools

from dpviz.core.config import RunConfig


def step_checks(ctx, cfg: RunConfig, workload, initial, snapshots: list, device) -> list[dict]:
    """Per step, on rank 0: the largest parameter gap across ranks and to one process,
    beside the float32 rounding bound (every rank joins the all-gather)."""
    import torch
    import torch.distributed as dist

    from dpviz.core.rounding import max_abs, update_bound
    from dpviz.engine.workloads import addition_chain, reference_kind

    if not cfg.checks:   # every rank skips the all_gather, or none does (the flag is in the config)
        return []
    mine = torch.stack(snapshots).cpu()
    everyone = [torch.empty_like(mine, device=device) for _ in range(ctx.world_size)]  # on the ranks' device
    dist.all_gather(everyone, mine.to(device))
    if ctx.rank != 0:
        return []
    reference = _reference(cfg.replace(bucket_cap_mb=None, profile=True))
    param_max, sums = max_abs([initial, *reference]), addition_chain(cfg, workload)
    max_update = max_abs(b - a for a, b in zip([initial, *reference], reference))  # lr·max|g|
    return [dict(step=step,
                 max_diff_across_ranks=max(float((e[step].cpu() - mine[step]).abs().max()) for e in everyone),
                 max_diff_vs_single_process=float((reference[step] - mine[step]).abs().max()),
                 rounding_bound=update_bound(sums, max_update, param_max, step + 1),
                 reference=reference_kind(workload.model))
            for step in range(cfg.steps)]


@functools.lru_cache(maxsize=4)
def _reference(cfg: RunConfig) -> list:
    """One process on the concatenated batches, kept per rank process: the reference does
    not depend on how DDP communicates (bucket cap, profiler), so a knob over those reuses
    it instead of training a second model on every move."""
    from dpviz.engine.workloads import single_process_params

    return single_process_params(cfg)

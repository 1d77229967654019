"""Exercise 4: gradient accumulation with `no_sync()`.

    def accumulate(ddp, micro_batches, loss_fn) -> None:
        '''Run forward and backward on each (x, y) of `micro_batches` so that afterwards
        every .grad holds the gradient of the mean loss over all K micro-batches (and all
        ranks), with DDP all-reducing only once, in the last micro-step.'''

No optimizer step: the checker reads the gradients. Two things are checked on live ranks:
the trace (a comm hook counts the buckets DDP all-reduces in each micro-step: 0, …, 0, n)
and the gradient, against dpviz's own run loop on the same micro-batches.

Named mistakes: `no_sync()` around backward only (DDP decides in forward whether the coming
backward syncs, so every micro-step still all-reduces), no `no_sync()` at all, syncing never,
and a loss not divided by K (the gradient comes out K× too large).
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.exercises.core import check_attempt, resolve, run_attempt
from dpviz.lessons.accumulation.records import AccumulationCheck, AccumulationRun
from dpviz.lessons.exercises.records import Verdict

EXERCISE = "gradient accumulation"
NAME = "accumulate"
EXERCISE_FACADE = ("check_accumulation",)  # what `dpviz.lessons.exercises.<name>` offers from here
K = 4   # a power of two: 1/K scales exactly, so scaling the loss or the gradients agree bit for bit
F32_EPS = 2.0 ** -23


class _Seen:
    """Comm-hook state: which micro-step we are in and what the hook saw there."""

    def __init__(self, ddp, world_size: int):
        self.ddp, self.world_size, self.micro, self.seen = ddp, world_size, -1, []


def _counting_allreduce(state: _Seen, bucket):
    """DDP's default averaging hook, noting the micro-step and the sync flag."""
    import torch.distributed as dist

    state.seen.append((state.micro, bool(state.ddp.require_backward_grad_sync)))
    buf = bucket.buffer().div_(state.world_size)
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])


def _watched_ddp(ctx: RankContext, cfg):
    """A DDP of the demo MLP whose forward calls mark micro-steps and whose hook counts."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpviz.engine.workloads import build_mlp, loss_fn, rank_batch

    model = build_mlp(cfg)
    ddp = DDP(model, bucket_cap_mb=cfg.bucket_cap_mb)
    state = _Seen(ddp, ctx.world_size)
    model.register_forward_pre_hook(lambda *_: setattr(state, "micro", state.micro + 1))
    ddp.register_comm_hook(state, _counting_allreduce)
    x, y = rank_batch(cfg, None, 1, 0, ctx.rank)  # iteration 0 packs one bucket; DDP rebuilds after it
    loss_fn(ddp(x), y).backward()
    model.zero_grad(set_to_none=True)
    state.micro, state.seen = -1, []
    return model, ddp, state


def accumulation_rank(ctx: RankContext, spec: tuple) -> dict:
    """Rank task: dpviz's run loop (the reference), then the learner's `accumulate`.

    Tolerance: each gradient element sums K·N per-micro-batch, per-rank terms scaled by
    1/(K·N). K is a power of two, so scaling the loss or the gradients by 1/K is exact, and
    both runs use the same hook dividing by N; what may differ is the order of the K·N − 1
    additions, ≤ (K·N)·eps·Σ|terms|, plus 2·eps·Σ|terms| of margin. Σ|terms| is measured:
    per-micro-batch gradients of a plain copy of the model.
    """
    import torch
    import torch.distributed as dist

    from dpviz.lessons.accumulation.live import DEMO_CONFIG, KeepGradient
    from dpviz.engine.ddp_run import BucketLog, train_step
    from dpviz.engine.workloads import build_mlp, loss_fn, rank_batch

    cfg = DEMO_CONFIG.replace(world_size=ctx.world_size, accum_steps=K)
    batches = [rank_batch(cfg, None, 0, m, ctx.rank) for m in range(K)]

    flat = lambda m: torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                                for p in m.parameters()])
    model, ddp, state = _watched_ddp(ctx, cfg)  # 1) the reference: dpviz's own train step
    keep = KeepGradient(model)
    train_step(ctx, cfg, ddp, keep, BucketLog({}, ctx.world_size), 0, lambda name: nullcontext())
    reference, ref_seen = keep.flat, list(state.seen)

    plain, scale = build_mlp(cfg), None  # 2) Σ|terms| from per-micro-batch gradients
    for x, y in batches:
        plain.zero_grad()
        loss_fn(plain(x), y).backward()
        term = flat(plain).abs() / (K * ctx.world_size)
        scale = term if scale is None else scale + term
    dist.all_reduce(scale)
    tol = (K * ctx.world_size + 2) * F32_EPS * scale

    fn = resolve(spec)  # 3) yours
    model, ddp, state = _watched_ddp(ctx, cfg)
    fn(ddp, batches, loss_fn)
    grad = flat(model)
    diff = (grad - reference).abs()
    return dict(reference=[sum(m == k for m, _ in ref_seen) for k in range(K)],
                counts=[sum(m == k for m, _ in state.seen) for k in range(K)],
                flags=[f for m, f in state.seen if m < K - 1], ratio=float(grad.norm() / reference.norm()),
                max_diff=float(diff.max()), tol=float(tol.max()), ok=bool((diff <= tol).all()))


def judge(r0: dict, results: list[dict], checked: str) -> Verdict:
    counts, ref = r0["counts"], r0["reference"]
    n_buckets = ref[-1]
    if counts != ref:
        early = any(counts[:-1])
        if early and not any(r0["flags"]):  # the hooks ran inside no_sync, yet they ran
            return Verdict(EXERCISE, False, checked, "backward_only",
                           f"all-reduces per micro-step {counts}, expected {ref}: no_sync() was on "
                           "during backward, yet DDP all-reduced anyway — it covers backward only. "
                           "DDP decides in forward (it arms the backward hooks there) whether backward syncs.",
                           "put forward and backward of the first K−1 micro-steps inside `with ddp.no_sync():`")
        if early:
            return Verdict(EXERCISE, False, checked, "no_no_sync",
                           f"all-reduces per micro-step {counts}, expected {ref}: every micro-step "
                           f"all-reduced its {n_buckets} buckets, K× the traffic",
                           "run the first K−1 micro-steps (forward and backward) inside `with ddp.no_sync():`")
        if not counts[-1]:
            return Verdict(EXERCISE, False, checked, "never_synced",
                           f"all-reduces per micro-step {counts}: the gradients were never averaged "
                           "across ranks (the last micro-step was inside no_sync too)",
                           "leave the last micro-step outside no_sync(): it all-reduces the sum")
        return Verdict(EXERCISE, False, checked, "trace",
                       f"all-reduces per micro-step {counts}, expected {ref}",
                       "one forward and one backward per micro-batch; no_sync for all but the last")
    if all(r["ok"] for r in results):
        return Verdict(EXERCISE, True, checked,
                       message=f"all-reduces per micro-step {counts}; the gradient equals dpviz's run "
                               f"loop (max |diff| {max(r['max_diff'] for r in results):.1e}, within float32 rounding)")
    if abs(r0["ratio"] - K) < 1e-3 * K:
        return Verdict(EXERCISE, False, checked, "missing_1_over_K",
                       f"the trace is right, but your gradient is {r0['ratio']:.4f}× the right one: "
                       f"the sum of K = {K} micro-batch gradients, not their mean",
                       "divide each micro-step's loss by K (len(micro_batches)) before backward")
    return Verdict(EXERCISE, False, checked, "wrong_gradient",
                   f"the trace is right, but the gradient differs by up to {r0['max_diff']:.3g} "
                   f"(allowed {r0['tol']:.1e}); ‖yours‖/‖right‖ = {r0['ratio']:.4f}",
                   "mean loss per micro-batch, divided by K, one backward each")


def check_accumulation(fn: Callable | None = None, *, cluster: Cluster | None = None,
                       world_size: int = 2) -> AccumulationCheck:
    """Run `fn(ddp, micro_batches, loss_fn)` for `K` micro-steps (this module's constant) on live ranks."""
    check_attempt(fn, NAME)
    with using_cluster(cluster, world_size) as ranks:
        return _check_accumulation_on(ranks, fn)


def _check_accumulation_on(cluster: Cluster, fn: Callable | None) -> AccumulationCheck:
    results, early, checked = run_attempt(cluster, accumulation_rank, fn, EXERCISE, NAME)
    if early is not None:
        return AccumulationCheck(early, K)
    r0 = results[0]
    reference = AccumulationRun(tuple(r0["reference"]), (), 1.0, 0.0, r0["tol"])
    yours = AccumulationRun(tuple(r0["counts"]), tuple(r0["flags"]), r0["ratio"],
                            max(r["max_diff"] for r in results), r0["tol"])
    return AccumulationCheck(judge(r0, results, checked), K, reference, yours)

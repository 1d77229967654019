"""Exercise 5: one ZeRO-1 optimizer step.

    def zero1_step(params, grad, state, comm) -> None:
        '''Adam (lr=1e-3, betas=(0.9, 0.999), eps=1e-8) on the flat float32 `params`, in
        place, keeping optimizer state only for this rank's shard.'''

`grad` is the flat gradient, already averaged (the same on every rank); `state` is a dict
that persists on this rank between calls (empty at the first). Shard the parameters N ways
(`torch.tensor_split(params, comm.world_size)[comm.rank]`), keep Adam's moments for your
shard only, step it, then `comm.all_gather(list_of_shards, your_shard)` so every rank holds
every updated parameter. A `torch.optim.Adam` over a copy of your shard is fine.

Checked on live ranks after 3 steps: the parameters against plain `torch.optim.Adam` on the
whole vector (tolerance from float32 rounding, below), and the bytes of tensors your
`state` holds: at most 12 bytes per parameter of your shard (m and v, 8; a copy of the
shard, 4) + 64, where plain Adam holds 8 per parameter of the whole model.

Named mistakes: no all-gather (other shards stay stale), and unsharded state.
"""
from __future__ import annotations

import math
from typing import Callable

from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.exercises.core import Comm, check_attempt, resolve, run_attempt
from dpviz.lessons.exercises.records import Verdict
from dpviz.lessons.zero.records import Zero1Check, Zero1Run
from dpviz.lessons.zero.records import ADAM_LR

EXERCISE = "ZeRO-1 step"
NAME = "zero1_step"
EXERCISE_FACADE = ("check_zero1",)  # what `dpviz.lessons.exercises.<name>` offers from here
PSI, STEPS = 1020, 3        # 1020 = 2²·3·5·17: equal shards for 2 to 6 ranks (gloo all-gathers equal sizes)
F32_EPS = 2.0 ** -23
BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


def state_bytes(obj, seen: set | None = None) -> int:
    """Bytes of the distinct tensors reachable from `obj` (dicts, lists, optimizers)."""
    import torch

    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        key = (obj.data_ptr(), obj.numel())
        if key in seen:
            return 0
        seen.add(key)
        return obj.numel() * obj.element_size()
    if isinstance(obj, torch.optim.Optimizer):
        return state_bytes(list(obj.state.values()), seen) + state_bytes(
            [g["params"] for g in obj.param_groups], seen)
    if isinstance(obj, dict):
        return sum(state_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(state_bytes(v, seen) for v in obj)
    return 0


def adam_reference(p0, grads):
    """Plain Adam on the whole vector; (params, max |m̂ / (√v̂ + ε)| over steps)."""
    import torch

    ref = p0.clone().requires_grad_()
    opt = torch.optim.Adam([ref], lr=ADAM_LR, betas=BETAS, eps=ADAM_EPS)
    biggest = 0.0
    for g in grads:
        ref.grad = g.clone()
        opt.step()
        st = opt.state[ref]
        t = float(st["step"])
        m_hat = st["exp_avg"] / (1 - BETAS[0] ** t)
        v_hat = st["exp_avg_sq"] / (1 - BETAS[1] ** t)
        biggest = max(biggest, float((m_hat / (v_hat.sqrt() + ADAM_EPS)).abs().max()))
    return ref.detach(), biggest


def zero1_rank(ctx: RankContext, spec: tuple) -> dict:
    """Rank task: 3 of your steps on shared data, beside plain Adam.

    Tolerance, per element: each step, yours and torch's compute the update lr·m̂/(√v̂+ε)
    with ≤ 8 float32 roundings each (moments, bias corrections, sqrt, +ε, divide, × lr),
    so they differ by ≤ 8·eps·lr·|û|; subtracting it from p rounds once more on each side,
    ≤ eps·|p|. Differences carried in m and v stay within the same eps multiples. Doubling
    the update term for margin: tol = STEPS · (eps·max|p| + 16·eps·lr·max|û|).
    Kernel paths (default, avx2, avx512) may fuse differently: only such rounding differs.
    """
    import torch

    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(PSI, generator=gen)
    grads = [torch.randn(PSI, generator=gen) for _ in range(STEPS)]  # "already averaged": same on every rank
    ref, u_max = adam_reference(p0, grads)
    tol = STEPS * (F32_EPS * float(ref.abs().max()) + 16 * F32_EPS * ADAM_LR * u_max)

    fn = resolve(spec)
    params, state, comm = p0.clone(), {}, Comm(ctx.rank, ctx.world_size)
    for g in grads:
        fn(params, g.clone(), state, comm)
    diff = (params - ref).abs()
    stale = (params == p0) & (ref != p0)
    return dict(diff=diff.tolist(), tol=tol, held=state_bytes(state), gathers=comm.count("all_gather"),
                stale=int(stale.sum()), first_stale=int(stale.nonzero()[0]) if bool(stale.any()) else -1,
                worst=int(diff.argmax()))


def judge(results: list[dict], checked: str) -> Verdict:
    n = len(results)
    shard = math.ceil(PSI / n)
    limit = 12 * shard + 64
    for rank, r in enumerate(results):
        if r["stale"] and not r["gathers"]:
            return Verdict(EXERCISE, False, checked, "no_all_gather",
                           f"rank {rank}: {r['stale']} of {PSI} parameters never moved (the first at "
                           f"index {r['first_stale']}) — you stepped your shard but did not all-gather: "
                           "the other shards' updates never reached this rank",
                           "after stepping your shard: comm.all_gather(list(torch.tensor_split(params, "
                           "comm.world_size)), your_updated_shard)")
    for rank, r in enumerate(results):
        worst = max(r["diff"])
        if worst > r["tol"]:
            return Verdict(EXERCISE, False, checked, "wrong_update",
                           f"rank {rank}: parameter {r['worst']} differs from plain Adam by {worst:.3g} "
                           f"after {STEPS} steps (float32 rounding allows {r['tol']:.2g})",
                           f"Adam with lr={ADAM_LR}, betas={BETAS}, eps={ADAM_EPS}, bias-corrected; "
                           "or torch.optim.Adam over a copy of your shard")
    held = [r["held"] for r in results]
    if max(held) >= 8 * PSI:
        return Verdict(EXERCISE, False, checked, "unsharded_state",
                       f"right parameters, but ranks hold {held} B of state: ≥ 8Ψ = {8 * PSI} B, "
                       "Adam's moments for every parameter on every rank — plain DDP's Adam, not ZeRO-1",
                       "keep m and v (or a torch.optim.Adam) for your shard only")
    if max(held) > limit:
        return Verdict(EXERCISE, False, checked, "too_much_state",
                       f"right parameters, but ranks hold {held} B of state; a shard of {shard} "
                       f"parameters needs at most 12·{shard} + 64 = {limit} B",
                       "keep only m, v (and a copy) of your shard in state")
    return Verdict(EXERCISE, True, checked,
                   message=f"equal to plain Adam after {STEPS} steps on {n} ranks (max |diff| "
                           f"{max(max(r['diff']) for r in results):.1e}, allowed {results[0]['tol']:.1e}); "
                           f"state per rank {held} B vs {8 * PSI} B for plain Adam")


def check_zero1(fn: Callable | None = None, *, cluster: Cluster | None = None, world_size: int = 2) -> Zero1Check:
    """Run `fn(params, grad, state, comm)` for 3 steps on live ranks."""
    check_attempt(fn, NAME)
    with using_cluster(cluster, world_size) as ranks:
        return _check_zero1_on(ranks, fn)


def _check_zero1_on(cluster: Cluster, fn: Callable | None) -> Zero1Check:
    results, early, checked = run_attempt(cluster, zero1_rank, fn, EXERCISE, NAME)
    if early is not None:
        return Zero1Check(early)
    run = Zero1Run(len(results), PSI, STEPS, tuple(tuple(r["diff"]) for r in results), results[0]["tol"],
                   tuple(r["held"] for r in results), tuple(r["gathers"] for r in results))
    return Zero1Check(judge(results, checked), run)

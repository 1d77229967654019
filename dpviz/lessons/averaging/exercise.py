"""Exercise 2: average gradients with a hook, as a hand-written DDP does.

    def average_gradient(param, comm) -> None:
        '''Called once per parameter when its gradient is ready; make param.grad the
        average of that gradient over all ranks.'''

The checker registers it with `param.register_post_accumulate_grad_hook`, which calls the
hook with the *parameter* (not its gradient), runs one backward of a small MLP on different
data per rank, and compares every `param.grad` with the mean of the ranks' gradients.
`comm.all_reduce(tensor)` sums over ranks in place; `comm.world_size` is N. Every call is
recorded, so the checker knows which tensor you communicated.

Named mistakes: averaging the parameter instead of its gradient (picotron issue #39: the
parameters are equal on every rank, so averaging them changes nothing and the gradients
are never synchronised), and summing without dividing by the world size.
"""
from __future__ import annotations

from typing import Callable

from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.exercises.core import Comm, check_attempt, resolve, run_attempt
from dpviz.lessons.averaging.records import GradientRun, HookCheck
from dpviz.lessons.exercises.records import Verdict

EXERCISE = "gradient-averaging hook"
NAME = "average_gradient"
EXERCISE_FACADE = ("check_hook",)  # what `dpviz.lessons.exercises.<name>` offers from here
F32_EPS = 2.0 ** -23


def _config(world_size: int):
    from dpviz.core.config import RunConfig

    return RunConfig(world_size=world_size, layers=2, width=16, batch_per_rank=8)


def hook_rank(ctx: RankContext, spec: tuple) -> dict:
    """Rank task: one backward with the learner's hook, beside the expected average.

    Tolerance: the expected gradient is Σ_r g_r / N by dist.all_reduce; a hook may sum in
    another order and divide before or after, so elementwise the two differ by at most
    (N + 1)·eps·Σ_r|g_r| / N (N − 1 reordered float32 additions and one division).
    """
    import torch
    import torch.distributed as dist

    from dpviz.engine.workloads import build_mlp, loss_fn, rank_batch

    cfg = _config(ctx.world_size)
    x, y = rank_batch(cfg, None, 0, 0, ctx.rank)
    plain = build_mlp(cfg)
    loss_fn(plain(x), y).backward()
    local = [p.grad.detach().clone() for p in plain.parameters()]
    expected = [g.clone() for g in local]
    scale = [g.abs() for g in local]
    for e, s in zip(expected, scale):
        dist.all_reduce(e)
        e.div_(ctx.world_size)
        dist.all_reduce(s)
        s.mul_((ctx.world_size + 1) * F32_EPS / ctx.world_size)

    fn = resolve(spec)
    model = build_mlp(cfg)
    comm = Comm(ctx.rank, ctx.world_size)
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: fn(p, comm))
    before = [p.detach().clone() for p in model.parameters()]
    loss_fn(model(x), y).backward()

    names = [n for n, _ in model.named_parameters()]
    params = {p.data_ptr(): n for n, p in model.named_parameters()}
    out = dict(names=names, params_touched=sorted({params[c["ptr"]] for c in comm.calls if c["ptr"] in params}),
               all_reduces=comm.count("all_reduce"), ratio=[], unsynced=[], diff=[], tol=[], wrong=None,
               changed=[n for n, p, b in zip(names, model.parameters(), before) if not torch.equal(p.detach(), b)])
    for name, p, e, s, g0 in zip(names, model.parameters(), expected, scale, local):
        grad = p.grad if p.grad is not None else torch.zeros_like(e)
        diff = (grad - e).abs()
        out["ratio"].append(float(grad.norm() / e.norm()))
        out["unsynced"].append(float(g0.norm() / e.norm()))
        out["diff"].append(float(diff.max()))
        out["tol"].append(float(s.max()))
        if out["wrong"] is None and bool((diff > s).any()):
            i = int((diff - s).argmax())
            out["wrong"] = (name, i, float(grad.reshape(-1)[i]), float(e.reshape(-1)[i]))
    return out


def judge(results: list[dict], checked: str) -> Verdict:
    n, r0 = len(results), results[0]
    touched = sorted({t for r in results for t in r["params_touched"]})
    if touched:
        return Verdict(EXERCISE, False, checked, "averaged_parameter",
                       f"you all-reduced the parameter {touched[0]}, not its gradient (picotron "
                       "issue #39): the hook receives the parameter. Parameters are equal on every "
                       "rank, so averaging them changed nothing, and the gradients were never averaged.",
                       "communicate param.grad: comm.all_reduce(param.grad), then divide it by comm.world_size")
    wrong = [r["wrong"] for r in results if r["wrong"] is not None]
    if not wrong:
        if any(r["changed"] for r in results):
            return Verdict(EXERCISE, False, checked, "parameters_changed",
                           f"gradients right, but the hook changed parameter {results[0]['changed'][:1]}",
                           "a gradient hook must leave the parameters alone: the optimizer updates them")
        return Verdict(EXERCISE, True, checked,
                       message=f"every gradient is the mean over {n} ranks (within float32 rounding)")
    if all(abs(x - n) < 1e-3 * n for x in r0["ratio"]):
        return Verdict(EXERCISE, False, checked, "missing_divide",
                       f"your gradients are {n}× the average: the sum over ranks, not the mean",
                       "after comm.all_reduce(param.grad), divide by comm.world_size")
    if sum(r["all_reduces"] for r in results) == 0:
        return Verdict(EXERCISE, False, checked, "no_communication",
                       "nothing went through comm.all_reduce: every rank kept its own gradient",
                       "all-reduce param.grad with comm.all_reduce, then divide by comm.world_size")
    name, i, got, want = wrong[0]
    return Verdict(EXERCISE, False, checked, "wrong_gradient",
                   f"{name}.grad[{i}] is {got:.6g}, the average over ranks is {want:.6g}",
                   "the figure compares each parameter's gradient norm with the right one")


def check_hook(fn: Callable | None = None, *, cluster: Cluster | None = None, world_size: int = 2) -> HookCheck:
    """Run `fn(param, comm)` as every parameter's post-accumulate-grad hook on live ranks."""
    check_attempt(fn, NAME)
    with using_cluster(cluster, world_size) as ranks:
        return _check_hook_on(ranks, fn)


def _check_hook_on(cluster: Cluster, fn: Callable | None) -> HookCheck:
    n = cluster.world_size
    results, early, checked = run_attempt(cluster, hook_rank, fn, EXERCISE, NAME)
    if early is not None:
        return HookCheck(early, n)
    r0 = results[0]
    yours = GradientRun(tuple(r0["names"]), tuple(r0["ratio"]),
                        tuple(max(r["diff"][i] for r in results) for i in range(len(r0["names"]))),
                        tuple(r0["tol"]))
    return HookCheck(judge(results, checked), n, yours, tuple(r0["unsynced"]))

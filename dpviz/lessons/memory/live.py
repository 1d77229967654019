"""Where a training step's memory goes: parameters, gradients, optimizer state, activations.

Every number is measured on real tensors after a real step of a workload (the MLP, the GPT, the
CNN or the user's model; `cfg.model`), never
computed from a formula: parameter and gradient bytes from the tensors themselves,
optimizer state from `optimizer.state` (Adam keeps two moments per parameter, SGD with
momentum one, plain SGD none), buffers from the module's registered buffers (BatchNorm's running
statistics), activations from saved-tensor hooks (exactly the tensors
autograd keeps for backward; process RSS is useless on CPU because glibc keeps freed pages).

Runs in the calling process (no ranks): one replica's memory is the same on every rank.
torch is imported inside functions; the record and its parts live in `memory_records`
(no torch), which renderers import.
"""
from __future__ import annotations

import dataclasses
import functools
from contextlib import contextmanager
from typing import Iterable

from dpviz.core.config import RunConfig, validate
from dpviz.lessons.memory.records import MemoryBreakdown, OPTIMIZERS

FACADE = ("measure_breakdown",)  # what `dpviz.<name>` offers from here

# --- measuring tensors ----------------------------------------------------------------------

@contextmanager
def one_thread():
    """Run torch ops on one intra-op thread, then restore the count.

    These workloads are tiny: on a shared machine a second thread only waits for a core
    (on a shared machine a second intra-op thread mostly spins waiting for a core: far more CPU,
    no speed-up).
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_threaded(fn):
    """Decorator: the whole call runs inside `one_thread()`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_thread():
            return fn(*args, **kwargs)

    return wrapper


def tensor_bytes(t) -> int:
    """Bytes this process holds for `t`; a sharded DTensor counts only its local shard."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def optimizer_state_bytes(optimizer) -> dict[str, int]:
    """Bytes of optimizer.state per key (summed over parameters), read after a real step.

    Works for a plain optimizer, for ZeroRedundancyOptimizer (its local `.optim` holds only
    this rank's partition) and for FSDP2's DTensor state (local shards).
    """
    inner = getattr(optimizer, "optim", optimizer)
    out: dict[str, int] = {}
    for state in inner.state.values():
        for key, value in state.items():
            if hasattr(value, "element_size"):  # tensors only (not python ints/floats)
                out[key] = out.get(key, 0) + tensor_bytes(value)
    return out


def make_optimizer(name: str, params: Iterable, lr: float):
    """One of OPTIMIZERS by name: 'sgd' (no state), 'momentum' (1 buffer), 'adam' (2 moments)."""
    import torch

    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def saved_activation_bytes(model, x) -> tuple[object, int]:
    """Run `model(x)`; return (output, bytes of the tensors autograd saved for backward).

    Parameters and buffers saved by an op (a Linear keeps its weight, BatchNorm its running
    statistics) are not activations and are left out; a tensor saved by two ops (ReLU's output
    is the next Linear's input) counts once.
    """
    import torch

    param_ptrs = {p.untyped_storage().data_ptr() for p in [*model.parameters(), *model.buffers()]}
    held: dict[int, int] = {}   # data pointer → bytes of the saved tensor (a view counts its own size)

    def pack(t):
        if t.untyped_storage().data_ptr() not in param_ptrs:
            held[t.data_ptr()] = max(held.get(t.data_ptr(), 0), t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    return out, sum(held.values())


# --- one measured step ----------------------------------------------------------------------

@single_threaded
def measure_breakdown(cfg: RunConfig | None = None, optimizer: str = "adam",
                      lr: float = 1e-3) -> MemoryBreakdown:
    """One real training step of the workload (one rank's batch); bytes of each part."""
    from dpviz.engine.workloads import build_workload, compute_loss, describe_workload, rank_batch

    cfg = validate(cfg or RunConfig())
    workload = build_workload(cfg)
    model = workload.model
    opt = make_optimizer(optimizer, model.parameters(), lr)
    x, y = rank_batch(cfg, workload, 0, 0, 0)           # one rank's inputs and targets
    out, activations = saved_activation_bytes(model, x)
    compute_loss(workload, out, y).backward()
    opt.step()                                          # optimizer state exists only after a step
    state = optimizer_state_bytes(opt)
    params = list(model.parameters())
    return MemoryBreakdown(
        config=cfg.to_dict(), optimizer=optimizer, n_params=sum(p.numel() for p in params),
        params=sum(tensor_bytes(p) for p in params),
        grads=sum(tensor_bytes(p.grad) for p in params if p.grad is not None),
        optimizer_state=sum(state.values()), activations=activations, state_by_key=state,
        buffers=sum(tensor_bytes(b) for b in model.buffers()),
        workload=describe_workload(model, workload.name))


def sweep_batch(cfg: RunConfig | None = None, batches: Iterable[int] = (32, 128, 512),
                optimizer: str = "adam") -> list[MemoryBreakdown]:
    """The breakdown at several per-rank batch sizes: only activations grow with the batch."""
    cfg = validate(cfg or RunConfig())
    return [measure_breakdown(dataclasses.replace(cfg, batch_per_rank=b), optimizer) for b in batches]


@single_threaded
def adam_moments_check(cfg: RunConfig | None = None, steps: int = 3, lr: float = 1e-3,
                       betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> dict:
    """Adam's two moments, by the paper's formula, next to torch.optim.Adam's state.

    m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²,  w ← w − lr·m̂ / (√v̂ + eps) with
    m̂ = m/(1−β1^t), v̂ = v/(1−β2^t). Returns the largest differences over `steps` steps
    and, beside each, the float32 rounding bound it must stay within (`bound <name>`): both
    sides use the very same gradient, so only the element-wise formula's own roundings differ —
    `exact_moment_bound` — i.e. `exp_avg` *is* m and `exp_avg_sq` *is* v.
    """
    import torch

    from dpviz.engine.workloads import build_workload, compute_loss

    cfg = validate(cfg or RunConfig())
    workload = build_workload(cfg)
    model = workload.model
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=betas, eps=eps)
    params = list(model.parameters())
    w = [p.detach().clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    diffs = dict(exp_avg=0.0, exp_avg_sq=0.0, params=0.0)
    scale = dict(exp_avg=0.0, exp_avg_sq=0.0, params=0.0)       # largest |m|, |v|, |w| seen
    b1, b2 = betas
    for t in range(1, steps + 1):
        x, y = workload.batch(t - 1, 0, cfg.world_size * cfg.batch_per_rank)   # the global batch
        compute_loss(workload, model(x), y).backward()
        for i, p in enumerate(params):
            g = p.grad
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat, v_hat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
            w[i] = w[i] - lr * m_hat / (v_hat.sqrt() + eps)
        opt.step()
        opt.zero_grad(set_to_none=True)
        for i, p in enumerate(params):
            state = opt.state[p]
            diffs["exp_avg"] = max(diffs["exp_avg"], float((state["exp_avg"] - m[i]).abs().max()))
            diffs["exp_avg_sq"] = max(diffs["exp_avg_sq"], float((state["exp_avg_sq"] - v[i]).abs().max()))
            diffs["params"] = max(diffs["params"], float((p.detach() - w[i]).abs().max()))
            for key, t in (("exp_avg", m[i]), ("exp_avg_sq", v[i]), ("params", w[i])):
                scale[key] = max(scale[key], float(t.abs().max()))
    bounds = adam_formula_bounds(steps, lr, scale)
    return {**diffs, **{f"bound {k}": b for k, b in bounds.items()}}


def adam_formula_bounds(steps: int, lr: float, scale: dict) -> dict:
    """How far two float32 evaluations of Adam's element-wise formula on the same gradients
    may drift apart in `steps` steps (torch's kernels order and fuse the operations
    differently: lerp, addcmul, sqrt, division, per CPU).

    m and v: each step rounds ≤ 3 times (two products, one sum), each by ≤ ε of the largest
    |m| or |v|: 3·ε·max per step. The parameter: one ulp of |w| per step for its own update,
    plus lr times the relative error of m̂/(√v̂ + eps), which is at most 1/√(1−β2) ≈ 32 in size
    (bias correction at step 1 of a one-sign gradient) and carries ≤ 8 roundings of m, v,
    the corrections, the square root and the division: 8·ε·32·lr per step.
    """
    from dpviz.core.rounding import EPS32

    return dict(exp_avg=steps * 3 * EPS32 * scale["exp_avg"],
                exp_avg_sq=steps * 3 * EPS32 * scale["exp_avg_sq"],
                params=steps * EPS32 * (scale["params"] + 8 * 32 * lr))

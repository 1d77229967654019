"""Every private torch call dpviz makes, each beside its fallback; and the public names that
differ between the torch versions dpviz supports.

dpviz runs on the torch a learner already has, so nothing outside this module reaches into
torch's internals. Each function below uses a private attribute where this torch has it and
otherwise falls back to public behaviour that gives the same record, only slower or with
less detail; none changes what DDP does in a plain run. `INTERNALS` names them all, and
`disable` turns some off on a warm rank so a test can run each fallback for real
(tests/test_torch_gate.py).
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

# the private attributes this module uses, by the name `disable` takes: DDP's and the
# profiler's, then those of nn.Module that single-process DP and the BatchNorm checks use
MODULE_INTERNALS = ("_replicate_for_data_parallel", "_BatchNorm")
INTERNALS = ("_compute_bucket_assignment_by_size", "_rebuild_buckets", "_has_rebuilt_buckets",
             "_get_zeros_like_grad_buckets", "_get_ddp_logging_data",
             "_set_ddp_runtime_logging_sample_rate", "kineto_results", "structured_input_shapes",
             *MODULE_INTERNALS)
_disabled: set[str] = set()


def disable(ctx, names: list[str]) -> None:
    """Rank task: behave as a torch without these internals would (`[]`: use them again)."""
    unknown = set(names) - set(INTERNALS)
    if unknown:
        raise ValueError(f"not a gated torch internal: {sorted(unknown)}")
    _disabled.clear()
    _disabled.update(names)


def _private(obj, name: str):
    return None if name in _disabled else getattr(obj, name, None)


# --- DDP's bucket assignment --------------------------------------------------------------

def bucket_assignment(tensors: list, limits: list[int], order: list[int]) -> list[list[int]]:
    """The buckets (indices into `order`'s parameters) DDP's assignment makes of `tensors`
    taken in `order`: torch's own function where it has one, else the same greedy packing
    (`dpviz.core.bucket_layout.assign_buckets`) on one dtype and device, which is what it does."""
    import torch.distributed as dist

    from dpviz.core.bucket_layout import assign_buckets

    assign = _private(dist, "_compute_bucket_assignment_by_size")
    if assign is not None:
        buckets, _ = assign(tensors, limits, [False] * len(tensors), order)
        return [list(b) for b in buckets]
    packed = assign_buckets([t.numel() * t.element_size() for t in tensors], limits)
    return [[order[position] for position in bucket] for bucket in packed]


@contextmanager
def initial_buckets(answer: Callable) -> Iterator[bool]:
    """Build a DDP inside this block to have `answer(real, parameters, *args)` give its initial
    bucket assignment; yields whether it can (False: DDP's own start, nothing replaced).

    DDP's constructor asks `torch.distributed._compute_bucket_assignment_by_size` once for its
    first buckets; a slider's DDP is answered with the buckets a rebuild would make."""
    import torch.distributed as dist

    real = _private(dist, "_compute_bucket_assignment_by_size")
    if real is None:
        yield False
        return
    dist._compute_bucket_assignment_by_size = lambda *args, **kwargs: answer(real, *args, **kwargs)
    try:
        yield True
    finally:
        dist._compute_bucket_assignment_by_size = real


# --- DDP's bucket rebuild -----------------------------------------------------------------

def rebuild_buckets_now(ddp) -> bool:
    """Have DDP rebuild its buckets now, as its next grad-enabled forward would; True if it
    did. False where this torch has no way to ask: the caller's next forward rebuilds them."""
    reducer_rebuild = _private(ddp.reducer, "_rebuild_buckets")
    if reducer_rebuild is None:
        return False
    if reducer_rebuild() and "_has_rebuilt_buckets" not in _disabled:   # what DDP's _pre_forward calls
        ddp._has_rebuilt_buckets = True   # and notes, as _pre_forward does
    return True


def has_rebuilt_buckets(ddp) -> bool:
    """Has DDP rebuilt its buckets? False where this torch does not say (the safe answer)."""
    return bool(_private(ddp, "_has_rebuilt_buckets"))


def ready_order(ddp) -> list | None:
    """The parameters of a rebuilt DDP in the order their gradients became ready (its
    buckets' parameters, bucket by bucket); None where this torch does not show its buckets."""
    buckets = _private(ddp.reducer, "_get_zeros_like_grad_buckets")
    if buckets is None:
        return None
    return [p for bucket in buckets() for p in bucket.parameters()]


# --- DDP's own logging --------------------------------------------------------------------

def log_every_iteration(ddp) -> None:
    """Have DDP time every iteration in its logging data (it samples some by default)."""
    set_rate = _private(ddp, "_set_ddp_runtime_logging_sample_rate")
    if set_rate is not None:
        set_rate(1)


def ddp_logging_data(ddp) -> dict:
    """DDP's own account of the run (bucket sizes, comm/compute times); {} where unavailable."""
    get = _private(ddp, "_get_ddp_logging_data")
    if get is None:
        return {}
    return {k: v for k, v in get().items() if isinstance(v, (int, float, str, bool))}


# --- the profiler's events ----------------------------------------------------------------

def reads_profiler_events() -> bool:
    """Can `kineto_events` read a finished profile's own events in this torch? Where not, a
    run exports its chrome trace and reads that (slower, the same spans)."""
    return "kineto_results" not in _disabled and _exposes_kineto_results()


@functools.lru_cache(maxsize=None)
def _exposes_kineto_results() -> bool:
    from torch.autograd.profiler import profile

    return hasattr(profile(), "kineto_results")   # set by its constructor, filled when it stops


def kineto_events(prof) -> list:
    """The profiler's own events of a finished `torch.profiler.profile` (only where
    `reads_profiler_events()`)."""
    return prof.profiler.kineto_results.events()


def input_shapes(event) -> list:
    """A profiler event's input shapes as its chrome trace writes them (`Input Dims`): a
    TensorList's as the list of its tensors' shapes.

    `_KinetoEvent.structured_input_shapes` gives exactly that (torch 2.13 has it; 2.11 does
    not). Without it, `shapes()` gives a TensorList as [], which would read as a 0-d tensor
    of 4 bytes; `flat_input_shapes` gives None instead, so its bytes are unknown, as in any
    profile taken without shapes."""
    structured = _private(event, "structured_input_shapes")
    if structured is not None:
        return structured()
    return flat_input_shapes(event.shapes(), event.dtypes())


def flat_input_shapes(shapes: Sequence, dtypes: Sequence[str]) -> list:
    """`input_shapes`' fallback: `shapes()` with each TensorList's entry None (unknown)."""
    return [None if dtype == "TensorList" else shape for shape, dtype in zip(shapes, dtypes)]


def has_list_shapes() -> bool:
    """Does this torch's profiler give a TensorList's shapes per event (`input_shapes`)?
    Where it does not, a bucket's all-reduce gets its size from the comm hook's notes
    (`dpviz.engine.profile_events.profile_output`), as a profile without shapes does."""
    from torch._C._autograd import _KinetoEvent

    return _private(_KinetoEvent, "structured_input_shapes") is not None


# --- modules: replicas and kinds ----------------------------------------------------------

def replicate(module, params: dict):
    """A replica of `module` computing with `params` (name → tensor, non-leaf: the broadcast
    copies), built as `torch.nn.parallel.replicate` builds one: a shallow copy of every
    submodule without parameters of its own (`_replicate_for_data_parallel`), the copies set
    as plain attributes. Models whose forward runs through a list of modules build that list
    from registered layers on each access (`MLP.blocks`), so the replica's forward uses its
    own layers. Without that call: a deep copy whose parameters are deleted and `params` set
    in their place, public calls that give the same forward (the copied values go unused)."""
    if _private(module, "_replicate_for_data_parallel") is None:
        return _replicate_by_copy(module, params)
    subs = dict(module.named_modules())
    copies = {name: m._replicate_for_data_parallel() for name, m in subs.items()}
    for name, m in subs.items():
        prefix = f"{name}." if name else ""
        for key, child in m._modules.items():
            copies[name]._modules[key] = None if child is None else copies[prefix + key]
        for key in m._parameters:
            setattr(copies[name], key, params[prefix + key])
    return copies[""]


def _replicate_by_copy(module, params: dict):
    import copy

    replica = copy.deepcopy(module)
    for name, tensor in params.items():
        owner, _, key = name.rpartition(".")
        sub = replica.get_submodule(owner)
        delattr(sub, key)            # unregisters the parameter
        setattr(sub, key, tensor)    # a plain tensor attribute: the forward reads it
    return replica


def batch_norm_classes() -> tuple:
    """The classes a BatchNorm layer is an instance of: their private base `_BatchNorm`, or,
    where this torch lacks it, the public BatchNorm classes (SyncBatchNorm included)."""
    from torch import nn

    base = _private(nn.modules.batchnorm, "_BatchNorm")
    if base is not None:
        return (base,)
    return (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
            nn.LazyBatchNorm1d, nn.LazyBatchNorm2d, nn.LazyBatchNorm3d)


# --- public names that changed between supported torch versions ----------------------------

def all_gather_single(dist) -> Callable:
    """`dist.all_gather_single` (torch 2.13 on, where `all_gather_into_tensor` is deprecated),
    else `dist.all_gather_into_tensor`: the same collective, its older name."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_single(dist) -> Callable:
    """`dist.reduce_scatter_single`, else `dist.reduce_scatter_tensor` (its older name)."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def ddp_syncing_buffers(ddp_class, module, forward_sync: bool, **kwargs):
    """`ddp_class(module)` that broadcasts rank 0's buffers at construction, and again before
    each forward only with `forward_sync`: DDP's `forward_sync_buffers` where it takes it
    (`broadcast_buffers` is deprecated there). Before it, `broadcast_buffers` decided both, so
    DDP is built with it on and its public attribute set after, which is what each forward
    reads."""
    import inspect

    if "forward_sync_buffers" in inspect.signature(ddp_class.__init__).parameters:
        return ddp_class(module, forward_sync_buffers=forward_sync, **kwargs)
    ddp = ddp_class(module, broadcast_buffers=True, **kwargs)
    ddp.broadcast_buffers = forward_sync
    return ddp

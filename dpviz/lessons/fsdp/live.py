"""FSDP in time, the live side: an FSDP2 step on gloo ranks, recorded unit by unit.

The model is sharded with `fully_shard`, a unit per block (the GPT's embedding, each
transformer block and its head; each Linear of the MLP) with the model as the root unit, or
the whole model as one unit. Every unit's collectives go through FSDP2's public custom-comm
hooks (`set_custom_all_gather`, `set_custom_reduce_scatter`) onto one emulated link per rank
(`dpviz.core.link`): a thread that waits α + wire bytes/β, then runs the real gloo collective, so
transfers take visible time and a prefetched all-gather really runs under compute. Times come
from module hooks placed around FSDP's own (before and after them), autograd hooks in backward
and the link thread; the bytes of gathered parameters alive are read from the storage FSDP
allocates and frees (its all-gather buffers and its unsharded parameters).

Two FSDP behaviours this relies on, as torch 2.13 has them: a collective that returns a
`Work` is waited on by FSDP before it copies the gathered data out (so the link's Work is
waited on, like NCCL's), and FSDP reads a reduce-scatter's output only at the optimizer step
(fp32, ReduceOp.AVG: nothing divides it in place), so the step waits for the link to drain
first. The single-process check at the end shows the training is exact.

The records and the model of the peak (no torch) are `dpviz.lessons.fsdp.records`.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import queue
import threading
import time
import weakref
from functools import partial

from dpviz.core.config import WARMUP_SAMPLES, RunConfig, validate, writable_dir
from dpviz.core.record import save
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.fsdp.records import (
    Compute, DRAIN, FsdpKnobs, FsdpRecord, KEPT_NOTE, ROOT, RankStep, Sample, Transfer, UnitInfo, Wait,
    check_knobs, transfer_ms,
)
from dpviz.lessons.zero.records import ADAM_LR

FACADE = ("record_fsdp", "fsdp_knobs")   # what `dpviz.<name>` offers from here

MODELS = ("gpt", "mlp")
# The GPT at its own size on 2 ranks and the classroom link, with 64 samples per rank (its
# default is 16): a unit's compute then takes about as long as its all-gather on the link, so
# prefetching has compute to hide under (at 16 the wire outlasted the compute several times).
DEMO_CONFIG = RunConfig(model="gpt", world_size=2, steps=2, batch_per_rank=64, link="classroom")
RECORD_FILE = "fsdp.json"


# --- which modules are units ----------------------------------------------------------------------

def fsdp_units(model, granularity: str) -> list[tuple[str, object]]:
    """(name, module) of the units below the root, in forward order. Per block: the GPT's token
    embedding, each transformer block and the head (the root keeps the small position embedding
    and final LayerNorm); the MLP's Linear layers. The whole model: none (the root is the unit)."""
    import torch

    if granularity == "model":
        return []
    if isinstance(getattr(model, "blocks", None), torch.nn.ModuleList):
        return [("tok_emb", model.tok_emb), *((f"blocks.{i}", b) for i, b in enumerate(model.blocks)),
                ("head", model.head)]
    return [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


def own_params(model, units: list[tuple[str, object]]) -> dict[str, list[str]]:
    """Unit name → the model's names of the parameters it holds (the root: those of no unit)."""
    held, out = set(), {}
    for name, module in units:
        ids = {id(p) for p in module.parameters()}
        out[name] = [n for n, p in model.named_parameters() if id(p) in ids]
        held |= ids
    rest = [n for n, p in model.named_parameters() if id(p) not in held]
    return ({ROOT: rest} if rest else {}) | out


# --- the rank's log ---------------------------------------------------------------------------

class StepLog:
    """What one rank saw: compute windows, collectives, waits and memory samples, in
    perf_counter seconds (every local rank reads the same monotonic clock). Only the step
    marked `active` is kept; hooks and the link thread both write here."""

    def __init__(self, names: list[str]):
        self.names, self.index = names, {n: i for i, n in enumerate(names)}
        self.active = False
        self.phase = "forward"
        self.current = names[0]            # the unit whose FSDP hook runs (who issues a collective)
        self.params: dict[int, list] = {i: [] for i in range(len(names))}   # their storages (`learn_params`)
        self.buffers: dict[int, tuple[int, int, object]] = {}   # key → (unit, bytes, storage weakref)
        self.keys = itertools.count()
        self.samples: list = []   # appended by both threads (a list append is atomic); sorted later
        self.windows: dict[tuple[str, str], dict[str, float]] = {}
        self.transfers: list[dict] = []
        self.waits: list[tuple] = []
        self.marks: dict[str, float] = {}

    def clear(self) -> None:
        """Forget the last recorded step (a kept model's log serves each of its runs); what FSDP
        holds stays known (its unsharded parameters, buffers still alive)."""
        self.samples, self.windows, self.transfers, self.waits, self.marks = [], {}, [], [], {}

    def sample(self) -> float:
        """Record the gathered bytes alive now, per unit; returns the time."""
        t = time.perf_counter()
        if self.active:
            params = [sum(s.nbytes() for s in self.params[i]) for i in range(len(self.names))]
            buffers = [0] * len(self.names)
            for unit, nbytes, _ in list(self.buffers.values()):
                buffers[unit] += nbytes
            self.samples.append((t, params, buffers))
        return t

    def mark(self, unit: str, phase: str, what: str) -> None:
        t = self.sample()
        if self.active:
            self.windows.setdefault((unit, phase), {}).setdefault(what, t)

    def enter(self, unit: str, phase: str) -> None:
        self.current = unit
        self.mark(unit, phase, "entered")

    def track_buffer(self, unit: str, tensor) -> None:
        """An all-gather output buffer: counted until its storage is freed (a weak reference's
        callback: the moment FSDP drops it, on whichever thread)."""
        key, storage = next(self.keys), tensor.untyped_storage()

        def freed(_ref, key=key):
            self.buffers.pop(key, None)
            self.sample()

        self.buffers[key] = (self.index[unit], storage.nbytes(), weakref.ref(storage, freed))

    def learn_params(self, unit: str, tensors: list) -> bool:
        """The unit's unsharded parameters, seen gathered: their storages are kept (FSDP reuses
        them, resizing each storage to free and refill it; a sample reads their sizes, at every
        hook: asking each tensor for its storage again was most of a sample's cost); True the
        first time."""
        i = self.index[unit]
        if self.params[i]:
            return False
        self.params[i] = [t.untyped_storage() for t in tensors]
        return True


# --- the link: FSDP's collectives on an emulated wire ------------------------------------------

def _work_class():
    import torch.distributed as dist

    class LinkWork(dist.Work):
        """A collective on the link: done when the link carried it and gloo completed it."""

        def __init__(self, log: StepLog, unit: str, op: str, phase: str):
            super().__init__()
            self.log, self.unit, self.op, self.phase = log, unit, op, phase
            self.done = threading.Event()
            self.error: BaseException | None = None

        def wait(self, timeout=None) -> bool:
            start = time.perf_counter()
            self.done.wait()
            if self.log.active:
                self.log.waits.append((self.unit, self.op, self.phase, start, self.log.sample()))
            if self.error is not None:
                raise self.error
            return True

        def is_completed(self) -> bool:
            return self.done.is_set()

    return LinkWork


class LinkWire:
    """One rank's link: collectives leave in the order FSDP issued them (the same on every
    rank), each after its wire time on a free link (sleeping: no CPU), then runs for real."""

    def __init__(self, link, world_size: int, log: StepLog):
        self.link, self.world_size, self.log = link, world_size, log
        self.work = _work_class()
        self.queue: queue.Queue = queue.Queue()
        self.pending = 0
        self.error: BaseException | None = None   # the first collective that failed
        self.idle = threading.Condition()
        self.thread = threading.Thread(target=self._serve, name="dpviz-fsdp-link", daemon=True)
        self.thread.start()

    def submit(self, op: str, unit: str, nbytes: int, launch, output, input_):
        """Queue `launch(out, in)` (an async gloo collective) for `unit`, to fill `output` from
        `input_`; returns its Work at once."""
        log = self.log
        work = self.work(log, unit, op, log.phase)
        entry = dict(unit=unit, op=op, phase=log.phase, bytes=nbytes, issued=log.sample(),
                     issued_by=log.current)
        with self.idle:
            self.pending += 1
        self.queue.put((entry, launch, output, input_, work))
        return work

    def _serve(self) -> None:
        while (item := self.queue.get()) is not None:
            entry, launch, output, input_, work = item
            del item
            try:
                entry["link_start"] = self.log.sample()
                if self.link is not None:
                    end = entry["link_start"] + transfer_ms(self.link, entry["bytes"], self.world_size) / 1e3
                    while (left := end - time.perf_counter()) > 0:
                        time.sleep(left)
                entry["link_end"] = self.log.sample()
                on_wire(launch, output, input_)
                del launch, output, input_   # FSDP alone holds its buffers now
                entry["done"] = self.log.sample()
                if self.log.active:
                    self.log.transfers.append(entry)
            except BaseException as err:   # surfaces where FSDP waits (or at the drain), naming the cause
                work.error = err
                self.error = self.error or err
            work.done.set()
            with self.idle:
                self.pending -= 1
                self.idle.notify_all()

    def drain(self) -> None:
        """Wait until every queued collective finished (the optimizer reads their results)."""
        start = time.perf_counter()
        with self.idle:
            self.idle.wait_for(lambda: self.pending == 0)
        if self.error is not None:   # a reduce-scatter's Work is never waited on by FSDP
            raise self.error
        if self.log.active:
            self.log.waits.append((DRAIN, "reduce_scatter", "backward", start, self.log.sample()))

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()


def on_wire(launch, output, input_) -> None:
    """Run the real collective on the link's own copies, then hand the result to FSDP's
    `output`: gloo may keep its tensors a moment after it completes (until its worker thread
    lets go), and FSDP's buffer is freed when FSDP drops it, as with NCCL's stream-ordered
    buffers, not when a gloo thread is next scheduled."""
    import torch

    wire_out = torch.empty_like(output)
    launch(wire_out, input_.clone()).wait()
    output.copy_(wire_out)


class LinkAllGather:
    """FSDP2's custom all-gather (`FSDPModule.set_custom_all_gather`): its output buffer is
    tracked, the collective goes onto the link."""

    def __init__(self, wire: LinkWire, unit: str):
        self.wire, self.unit = wire, unit

    def allocate(self, size, *, dtype, device):
        import torch

        tensor = torch.empty(size, dtype=dtype, device=device)
        self.wire.log.track_buffer(self.unit, tensor)
        return tensor

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        import torch.distributed as dist

        from dpviz.engine.torch_gate import all_gather_single

        gather = all_gather_single(dist)
        return self.wire.submit("all_gather", self.unit, output_tensor.numel() * output_tensor.element_size(),
                                lambda out, inp: gather(out, inp, group=group, async_op=True),
                                output_tensor, input_tensor)


class LinkReduceScatter:
    """FSDP2's custom reduce-scatter (`set_custom_reduce_scatter`), onto the link. FSDP calls it
    in the unit's post-backward, after freeing the unit's parameters: the unit has left."""

    def __init__(self, wire: LinkWire, unit: str):
        self.wire, self.unit = wire, unit

    def allocate(self, size, *, dtype, device):
        import torch

        return torch.empty(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        import torch.distributed as dist

        from dpviz.engine.torch_gate import reduce_scatter_single

        scatter = reduce_scatter_single(dist)
        self.wire.log.mark(self.unit, "backward", "left")
        return self.wire.submit("reduce_scatter", self.unit, input_tensor.numel() * input_tensor.element_size(),
                                lambda out, inp: scatter(out, inp, op=op, group=group, async_op=True),
                                output_tensor, input_tensor)


# --- hooks around FSDP's own --------------------------------------------------------------------

def _tensors(output) -> list:
    import torch

    if isinstance(output, torch.Tensor):
        return [output] if output.requires_grad else []
    if isinstance(output, (tuple, list)):
        return [t for o in output for t in _tensors(o)]
    return []


def watch_unit(log: StepLog, name: str, module, param_names: list[str], prefix: str) -> None:
    """Hooks placed before and after FSDP's on one unit (FSDP prepends its pre-forward hook and
    appends its post-forward hook when `fully_shard` runs; these are added after it):

    forward: entered (before FSDP gathers), compute start (after), compute end (before FSDP
    frees), left (after); backward: entered (a gradient hook before FSDP's pre-backward),
    compute start (the output's autograd node about to run: every gradient hook done), compute
    end (every parameter's gradient computed: before FSDP's post-backward frees and
    reduce-scatters)."""
    import torch

    def enter_forward(_module, _args):
        log.phase = "forward"
        log.enter(name, "forward")

    def start_forward(_module, _args):
        tensors = [module.get_parameter(n[len(prefix):]) for n in param_names]
        if all(not hasattr(t, "device_mesh") for t in tensors) and log.learn_params(name, tensors):
            torch.autograd.graph.register_multi_grad_hook(
                tensors, lambda _grads: log.mark(name, "backward", "end"), mode="all")
        log.mark(name, "forward", "start")

    def end_forward(_module, _args, output):
        log.mark(name, "forward", "end")
        for t in _tensors(output):
            t.register_hook(lambda _grad: log.enter(name, "backward"))

    def leave_forward(_module, _args, output):
        log.mark(name, "forward", "left")
        for t in _tensors(output)[:1]:
            if t.grad_fn is not None:
                t.grad_fn.register_prehook(lambda _grads: log.mark(name, "backward", "start"))

    module.register_forward_pre_hook(enter_forward, prepend=True)
    module.register_forward_pre_hook(start_forward)
    module.register_forward_hook(end_forward, prepend=True)
    module.register_forward_hook(leave_forward)


def no_backward_prefetch(module) -> None:
    """Turn off FSDP2's implicit backward prefetch for one unit. FSDP prefetches the previous
    unit in backward by default; an explicit prefetch list replaces that default, and the
    unit's own all-gather is already done when its pre-backward runs (a no-op), so [itself]
    is 'prefetch nothing' through public API (an empty list means 'the default')."""
    module.set_modules_to_backward_prefetch([module])


def shard_model(model, units: list[tuple[str, object]], knobs: FsdpKnobs, mesh, wire: LinkWire) -> None:
    """`fully_shard` every unit, then the model (the root); collectives onto the link; prefetch
    the next unit in forward (from the root, where it holds parameters) and the previous in
    backward, or nothing."""
    from torch.distributed.fsdp import fully_shard

    for _, module in units:
        fully_shard(module, mesh=mesh, reshard_after_forward=knobs.reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=knobs.reshard_after_forward)
    modules = [m for _, m in units]
    for name, module in [*units, (ROOT, model)]:
        if name in wire.log.index:
            module.set_custom_all_gather(LinkAllGather(wire, name))
            module.set_custom_reduce_scatter(LinkReduceScatter(wire, name))
    holders = ([model] if ROOT in wire.log.index else []) + modules
    for module in [model, *modules]:
        no_backward_prefetch(module)
    if knobs.prefetch:
        for a, b in zip(holders, holders[1:]):
            a.set_modules_to_forward_prefetch([b])
        for a, b in zip(modules[1:], modules):
            a.set_modules_to_backward_prefetch([b])


def backend_ran(group) -> dict[str, str]:
    """What the backend runs for FSDP's two collectives: one of each under the profiler, and
    the backend's own event after each `c10d::` call (gloo runs a reduce-scatter as an
    all-reduce)."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from dpviz.engine.torch_gate import all_gather_single, reduce_scatter_single

    n = group.size()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        all_gather_single(dist)(torch.empty(2 * n), torch.ones(2), group=group)
        reduce_scatter_single(dist)(torch.empty(2), torch.ones(2 * n), op=dist.ReduceOp.AVG, group=group)
    events = sorted((e.time_range.start, e.name) for e in prof.events())
    backend = dist.get_backend(group)
    ran = [name for _, name in events if name.startswith(f"{backend}:")]
    return dict(zip(("all_gather", "reduce_scatter"), ran))


# --- the rank task --------------------------------------------------------------------------------

@dataclasses.dataclass
class Sharded:
    """A model sharded by FSDP on this rank (`shard`), with its hooks' log, its link and its
    optimizer: what a run trains and records."""

    workload: object           # a dpviz.engine.workloads.Workload; its model is the root unit
    units: list                # (name, module) below the root, in forward order
    held: dict                 # unit name → the model's names of the parameters it holds
    log: StepLog
    wire: LinkWire
    opt: object
    full_bytes: int            # every parameter, unsharded
    info: dict | None          # the workload described (rank 0)
    trained: list | None = None   # kept ones: the training state after the warm-up steps


# A knob's move (a light run, `_run_knobs`) on a warm rank keeps its sharded model for the next
# move to the same setting: building the model, `fully_shard`ing it and the warm-up step (FSDP's
# lazy init, Adam's state) were most of a move's run (benchmarks/knob_latency.py). Every knob
# setting of one model fits: 2 reshard × 2 prefetch × 2 unit choices; each kept model holds
# its shards, Adam's state and a copy of both (a few MiB for the demo GPT).
_KEPT: "collections.OrderedDict[tuple, Sharded]" = collections.OrderedDict()
KEPT_ENTRIES = 8


def shard(ctx: RankContext, cfg: RunConfig, knobs: FsdpKnobs, paths: list[str] = ()) -> Sharded:
    """Build `cfg`'s model, shard it per `knobs` onto a new link, hook its units, and give it Adam."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from dpviz.engine.workloads import build_workload, describe_workload, use_import_path

    use_import_path(list(paths))
    workload = build_workload(cfg)
    model = workload.model
    full_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    info = describe_workload(model, workload.name) if ctx.rank == 0 else None
    units = fsdp_units(model, knobs.units)
    held = own_params(model, units)
    log = StepLog(list(held))
    wire = LinkWire(cfg.link, ctx.world_size, log)
    try:
        shard_model(model, units, knobs, DeviceMesh.from_group(dist.group.WORLD, "cpu"), wire)
        prefixes = {name: f"{name}." for name, _ in units} | {ROOT: ""}
        for name, module in [(ROOT, model), *units]:
            if name in held:      # after fully_shard: these hooks go around FSDP's
                watch_unit(log, name, module, held[name], prefixes[name])
        # foreach (torch's default on GPUs; on CPU it loops per parameter): one call per op over
        # every parameter, where each per-parameter op went through DTensor's Python dispatch;
        # the same parameters bit for bit, a shorter step (benchmarks/README.md, knob_latency)
        opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR, foreach=True)
    except BaseException:
        wire.close()
        raise
    return Sharded(workload, units, held, log, wire, opt, full_bytes, info)


def kept_key(cfg: RunConfig, knobs: FsdpKnobs) -> tuple:
    """What a kept model's state after its warm-up depends on: the run but its link (the
    warm-up steps run without the link's wait), and the knobs."""
    return dataclasses.replace(cfg, link=None), knobs


def kept(cfg: RunConfig, knobs: FsdpKnobs) -> Sharded | None:
    """The sharded model this rank keeps for a light run of `cfg` at `knobs`, if any."""
    return _KEPT.get(kept_key(cfg, knobs))


def training_state(sharded: Sharded) -> list:
    """This rank's shards of the parameters and of Adam's state, in a fixed order: all that a
    step changes (gradients are dropped after each step)."""
    import torch

    local = lambda t: t.to_local() if hasattr(t, "to_local") else t
    tensors = []
    with torch.no_grad():   # to_local() is then the DTensor's own local tensor, not a view
        for p in sharded.workload.model.parameters():
            state = sharded.opt.state.get(p, {})
            tensors += [local(p), *(local(state[k]) for k in sorted(state) if torch.is_tensor(state[k]))]
    return tensors


def _keep(key: tuple, sharded: Sharded) -> None:
    """Keep `sharded` with a copy of its training state now (after its warm-up steps)."""
    sharded.trained = [t.detach().clone() for t in training_state(sharded)]
    _KEPT[key] = sharded
    while len(_KEPT) > KEPT_ENTRIES:
        _drop(next(iter(_KEPT)))


def _drop(key: tuple) -> None:
    """Forget a kept model and stop its link's thread."""
    _KEPT.pop(key).wire.close()


def _restored(key: tuple) -> Sharded | None:
    """The kept model for `key`, back at its state after the warm-up steps: bit for bit what a
    fresh build and its warm-up make (tests/test_fsdp.py), so its run is what one from nothing
    records."""
    import torch

    sharded = _KEPT.get(key)
    if sharded is None:
        return None
    _KEPT.move_to_end(key)
    with torch.no_grad():
        for tensor, saved in zip(training_state(sharded), sharded.trained):
            tensor.copy_(saved)
    return sharded


def train_step(ctx: RankContext, cfg: RunConfig, sharded: Sharded, step: int, recorded: bool) -> None:
    """One Adam step. The recorded one starts on every rank together (its waits are FSDP's, not
    a late start's) with a cleared log and the link's wait on; a warm-up step of a light run
    (`cfg.warmup`) trains WARMUP_SAMPLES samples per rank, the link's wait off: FSDP's lazy
    init and Adam's state need a step, not its batch or its link."""
    import torch.distributed as dist

    from dpviz.engine.workloads import compute_loss, rank_batch

    log, wire, workload = sharded.log, sharded.wire, sharded.workload
    if recorded:
        log.clear()
        dist.barrier()
    log.active = recorded
    x, y = rank_batch(cfg, workload, step, 0, ctx.rank)
    light = cfg.warmup == "light" and not recorded
    wire.link = None if light else cfg.link
    if light:
        x, y = x[:WARMUP_SAMPLES], y[:WARMUP_SAMPLES]
    log.marks["start"] = log.sample()
    log.phase = "forward"
    loss = compute_loss(workload, workload.model(x), y)
    log.marks["forward_end"] = log.sample()
    log.phase = "backward"
    loss.backward()
    wire.drain()
    sharded.opt.step()
    sharded.opt.zero_grad(set_to_none=True)
    log.marks["end"] = log.sample()
    log.active = False


def fsdp_rank(ctx: RankContext, cfg: RunConfig, knobs: FsdpKnobs, checks: bool, paths: list[str] = ()) -> dict:
    """Train `cfg.steps` Adam steps with FSDP2 on this rank; the last one is recorded. With
    `checks`, compare with one process and probe what the backend runs for each collective.
    A light run (a knob's move) reuses the sharded model a run of the same setting kept,
    restored to its state after the warm-up steps, and keeps the one it built (`_KEPT`)."""
    import torch
    import torch.distributed as dist

    from dpviz.engine.ddp_run import Parts
    from dpviz.engine.warm_ranks import WARM_MAX_BYTES

    parts, key = Parts(), kept_key(cfg, knobs)
    light = cfg.warmup == "light"
    sharded = _restored(key) if light else None
    reused = sharded is not None
    sharded = sharded or shard(ctx, cfg, knobs, paths)
    parts.mark("setup")
    try:
        if not reused:
            for step in range(cfg.steps - 1):
                train_step(ctx, cfg, sharded, step, recorded=False)
            if light and sharded.full_bytes <= WARM_MAX_BYTES:
                _keep(key, sharded)
        parts.mark("warmup")
        train_step(ctx, cfg, sharded, cfg.steps - 1, recorded=True)
        parts.mark("step")
    except BaseException:
        if _KEPT.get(key) is sharded:
            del _KEPT[key]   # a failed step may leave FSDP mid-step: never reuse it
        raise
    finally:
        if _KEPT.get(key) is not sharded:
            sharded.wire.close()
    model, log = sharded.workload.model, sharded.log
    shard_bytes = sum(p.to_local().untyped_storage().nbytes() for p in model.parameters())
    gathered = {name: max((s[1][i] for s in log.samples), default=0) for name, i in log.index.items()}
    diff = ratio = None
    ran = {}
    if checks:   # after the recorded step: full_tensor() is itself an all-gather
        from dpviz.lessons.zero.live import compare_with_single_process

        full = torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])
        diff, ratio = compare_with_single_process(cfg, full) if ctx.rank == 0 else (None, None)
        ran = backend_ran(dist.group.WORLD)
    sizes = {n: p.numel() * p.element_size() for n, p in model.named_parameters()}
    held = sharded.held
    result = dict(rank=ctx.rank, log=_export(log), shard_bytes=shard_bytes, full_bytes=sharded.full_bytes,
                  units=[(name, held[name], sum(sizes[n] for n in held[name]), gathered[name]) for name in held],
                  backend_ran=ran, diff=diff, ratio=ratio, workload=sharded.info, reused=reused)
    parts.mark("export")
    return result | dict(parts_ms=parts.ms)


def _export(log: StepLog) -> dict:
    """The recorded step as plain lists (seconds on the shared clock)."""
    return dict(marks=dict(log.marks), windows={f"{u}|{p}": w for (u, p), w in log.windows.items()},
                transfers=list(log.transfers), waits=list(log.waits), samples=list(log.samples))


# --- parent side ----------------------------------------------------------------------------------

def validate_fsdp(cfg: RunConfig, knobs: FsdpKnobs) -> RunConfig:
    """Everything checked before a rank starts."""
    cfg = validate(cfg)
    check_knobs(knobs)
    if cfg.model not in MODELS:
        raise ValueError(f"fsdp records the built-in {' and '.join(MODELS)} (units: the GPT's embedding, "
                         f"blocks and head; the MLP's layers), got model={cfg.model!r}")
    if cfg.backend != "gloo":
        raise ValueError("the FSDP recording runs on CPU gloo ranks (its link is a thread beside "
                         "each rank's compute): use backend='gloo'")
    if cfg.world_size < 2:
        raise ValueError(f"FSDP over {cfg.world_size} rank shards nothing and gathers nothing: use 2 or more ranks")
    if cfg.steps < 2:
        raise ValueError(f"steps must be at least 2 (step 0 initialises FSDP; a later step is recorded), "
                         f"got {cfg.steps}")
    for name, default in (("accum_steps", 1), ("checkpoint_every", 0), ("slow_rank", None)):
        if getattr(cfg, name) != default:
            raise ValueError(f"fsdp records plain steps: leave {name} at {default!r}, got {getattr(cfg, name)!r}")
    return cfg


def record_fsdp(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                reshard_after_forward: bool = True, prefetch: bool = True, units: str = "block",
                checks: bool = True, out: str | os.PathLike | None = None) -> FsdpRecord:
    """One FSDP2 training run on live gloo ranks (`cfg.steps` Adam steps, the last recorded):
    per rank, every unit's all-gathers, compute and reduce-scatter on the common clock, and the
    gathered bytes alive. `cfg.link` is the emulated link (None: raw loopback). `checks`
    compares the trained parameters with one process running Adam on the whole batch and
    records what the backend ran for each collective (a slider's moves skip both). `out` also
    writes fsdp.json there."""
    from dpviz.engine.workloads import import_path

    knobs = FsdpKnobs(reshard_after_forward, prefetch, units)
    cfg = validate_fsdp(cfg or DEMO_CONFIG, knobs)
    if not isinstance(checks, bool):
        raise ValueError(f"checks must be True or False, got {checks!r}")
    out_dir = writable_dir(out) if out is not None else None
    with using_cluster(cluster, cfg.world_size, "gloo", cfg.timeout_s, exact=True) as ranks:
        results = ranks.run_task(fsdp_rank, cfg, knobs, checks, import_path(), timeout_s=cfg.timeout_s)
    record = assemble(cfg, knobs, results)
    if out_dir is not None:
        save(record, out_dir / RECORD_FILE)
    return record


def assemble(cfg: RunConfig, knobs: FsdpKnobs, results: list[dict]) -> FsdpRecord:
    """The ranks' logs → one record, in ms from the earliest rank's step start."""
    origin = min(r["log"]["marks"]["start"] for r in results)
    ms = lambda t: (t - origin) * 1e3
    first = results[0]
    gathered = {name: max(u[3] for r in results for u in r["units"] if u[0] == name) for name, *_ in first["units"]}
    infos = tuple(UnitInfo(name, tuple(params), nbytes, gathered[name]) for name, params, nbytes, _ in first["units"])
    ranks = []
    for r in results:
        log = r["log"]
        computes = []
        for key, w in log["windows"].items():
            unit, phase = key.split("|")
            if "start" in w and "end" in w:
                computes.append(Compute(unit, phase, ms(w["start"]), ms(w["end"]),
                                        ms(w.get("entered", w["start"])), ms(w.get("left", w["end"]))))
        ranks.append(RankStep(
            rank=r["rank"], shard_bytes=r["shard_bytes"], start_ms=ms(log["marks"]["start"]),
            end_ms=ms(log["marks"]["end"]), forward_end_ms=ms(log["marks"]["forward_end"]),
            computes=tuple(sorted(computes, key=lambda c: c.start_ms)),
            transfers=tuple(Transfer(e["unit"], e["op"], e["phase"], e["bytes"], ms(e["issued"]),
                                     ms(e["link_start"]), ms(e["link_end"]), ms(e["done"]), e["issued_by"])
                            for e in sorted(log["transfers"], key=lambda e: e["issued"])),
            waits=tuple(Wait(u, op, phase, ms(a), ms(b)) for u, op, phase, a, b in log["waits"]),
            samples=tuple(Sample(ms(t), tuple(p), tuple(b)) for t, p, b in sorted(log["samples"]))))
    return FsdpRecord(
        config=cfg.to_dict(), knobs=knobs, world_size=cfg.world_size, units=infos, ranks=tuple(ranks),
        full_bytes=first["full_bytes"], step=cfg.steps - 1, backend_ran=first["backend_ran"],
        max_diff_vs_single_process=first["diff"], diff_over_rounding_bound=first["ratio"],
        workload=first["workload"],
        notes=("times: each rank's perf_counter, one monotonic clock on this machine",
               "memory: storage bytes of gathered parameters and all-gather buffers, sampled at "
               "every hook, collective and buffer free",
               *((KEPT_NOTE,) if all(r["reused"] for r in results) else ())))


# --- the knobs, live ------------------------------------------------------------------------------

def _run_knobs(cluster: Cluster, cfg: RunConfig, knobs: FsdpKnobs, gbps: float) -> FsdpRecord:
    """A knob's move: the recorded step as `record_fsdp` runs it, after a light warm-up (its
    step on WARMUP_SAMPLES samples per rank, the link's wait off): a full warm-up step would
    cost a move about as much as the step it shows. The ranks keep each setting's sharded
    model (`fsdp_rank`): a later move to it skips the build, the sharding and the warm-up."""
    return record_fsdp(cfg.replace(link=cfg.link.with_gbps(gbps), warmup="light", checks=False), cluster=cluster,
                       reshard_after_forward=knobs.reshard_after_forward, prefetch=knobs.prefetch,
                       units=knobs.units, checks=False)


def fsdp_knobs(cluster: Cluster, cfg: RunConfig | None = None, knobs: FsdpKnobs = FsdpKnobs(),
               gbps: tuple[float, ...] | None = None, value: float | None = None):
    """The knob panel (`dpviz.lessons.fsdp.widgets.fsdp_panel`) re-running `cfg` on the warm `cluster`:
    reshard_after_forward, prefetching, units, and the link's bandwidth (default the link's own
    × ¼ … 10, `dpviz.core.link.slider_gbps`). A move skips the single-process check."""
    from dpviz.core.link import slider_gbps
    from dpviz.lessons.fsdp.widgets import fsdp_panel

    cfg = validate_fsdp(cfg or DEMO_CONFIG, knobs)
    if cluster.world_size != cfg.world_size:
        raise ValueError(f"the cluster has {cluster.world_size} ranks, the config {cfg.world_size}: "
                         "pass a matching cfg or Cluster")
    values, start = slider_gbps(cfg.link, gbps, value)
    return fsdp_panel(partial(_run_knobs, cluster, cfg), knobs, values, start, cluster=cluster)


PREFETCH_ARMS = ("prefetch on", "prefetch off")   # notebook 09b's verdict names its arms so


def prefetch_verdict(cfg: RunConfig | None = None, *, cluster: Cluster | None = None,
                     cap_s: float | None = None):
    """Notebook 09b's prefetch lesson judged on data: `cfg` with prefetching on and off, run
    interleaved on the warm ranks (no checks) until their link wait (`records.run_link_wait_ms`:
    exposed communication less waiting for a slower peer) differs beyond the spread, or the
    time cap passes (`dpviz.engine.verdicts`). Returns its `SizedComparison` of `FsdpRecord`s."""
    from dpviz.engine.verdicts import check_cap_s, compare_on_link
    from dpviz.lessons.fsdp.records import run_link_wait_ms

    cfg = validate_fsdp(cfg or DEMO_CONFIG, FsdpKnobs())
    cap_s = check_cap_s(cap_s)
    with using_cluster(cluster, cfg.world_size, "gloo", cfg.timeout_s, exact=True) as ranks:
        arms = {name: partial(_prefetch_run, ranks, cfg, name == PREFETCH_ARMS[0]) for name in PREFETCH_ARMS}
        return compare_on_link(cfg.link, arms, run_link_wait_ms, quantity="link wait", cap_s=cap_s)


def _prefetch_run(cluster: Cluster, cfg: RunConfig, prefetch: bool, link) -> FsdpRecord:
    return record_fsdp(cfg.replace(link=link), cluster=cluster, prefetch=prefetch, checks=False)

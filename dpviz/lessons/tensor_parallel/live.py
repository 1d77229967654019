"""Tensor parallelism (Megatron 1D) and sequence parallelism of one MLP block, on live ranks.

The block is LayerNorm → Linear(D→H) → GELU → Linear(H→D) on activations of shape (S, B, D)
(sequence first, as Megatron lays them out, so a sequence shard is a contiguous slice).

* **TP**: fc1 is *column-parallel* (rank r keeps hidden units r·H/N … (r+1)·H/N: rows of W1),
  fc2 is *row-parallel* (the matching columns of W2). GELU acts element-wise, so no rank needs
  another's hidden units: each produces a partial fc2 output and ONE all-reduce (the "g"
  operator) sums them. Backward mirrors it: one all-reduce of the input gradient ("f").
* **TP + SP**: outside the TP region (here the LayerNorm) every rank would compute the same
  thing on the same full activations. Sequence parallelism instead gives each rank S/N tokens
  there; an all-gather rebuilds the full sequence before fc1 and a reduce-scatter after fc2
  both sums the partials and hands each rank its tokens back. Ring all-reduce *is*
  reduce-scatter + all-gather, so the bytes on the wire do not change; LayerNorm activations
  shrink 1/N. The price: LayerNorm and fc2-bias gradients now come from S/N tokens and must be
  all-reduced (3·D numbers).

Everything is checked against one process running plain `nn.LayerNorm`/`nn.Linear` on the same
weights. Rank-side code runs via `Cluster.run_task`; the records and Megatron's expected sizes
(no torch) are `dpviz.lessons.tensor_parallel.records`.
"""
from __future__ import annotations

from dpviz.core.config import require_int
from dpviz.engine.launch import Cluster, RankContext, using_cluster
from dpviz.lessons.tensor_parallel.records import (
    Collective, EqualityCheck, MODES, SavedTensor, TPRank, TensorParallelRecord, WHERE,
)

FACADE = ("measure_tensor_parallel",)  # what `dpviz.<name>` offers from here

# --- inside a rank -----------------------------------------------------------------------------

class _Comm:
    """Collectives over the TP group (dim 0 = sequence), each logged with its buffer sizes."""

    def __init__(self, group, n: int, mode: str):
        self.group, self.n, self.mode, self.log = group, n, mode, []

    def run(self, op: str, t, phase: str):
        """all_reduce: sum; all_gather: concatenate token shards; reduce_scatter: sum, keep 1/N."""
        import torch
        import torch.distributed as dist

        from dpviz.engine.torch_gate import all_gather_single, reduce_scatter_single

        if self.n == 1:                  # Megatron skips collectives in a group of one
            return t
        t = t.contiguous()
        if op == "all_reduce":
            out = t.clone()
            dist.all_reduce(out, group=self.group)
        elif op == "all_gather":
            out = torch.empty((t.shape[0] * self.n, *t.shape[1:]), dtype=t.dtype)
            all_gather_single(dist)(out, t, group=self.group)
        else:
            out = torch.empty((t.shape[0] // self.n, *t.shape[1:]), dtype=t.dtype)
            reduce_scatter_single(dist)(out, t, group=self.group)
        where = WHERE.get((self.mode, phase, op)) or WHERE[(self.mode, phase)]
        self.log.append(dict(op=op, phase=phase, where=where, in_bytes=t.numel() * t.element_size(),
                             out_bytes=out.numel() * out.element_size()))
        return out


_OPS: dict | None = None


def _ops() -> dict:
    """The four conjugate operators as autograd Functions (built lazily: torch only in ranks)."""
    global _OPS
    if _OPS is None:
        import torch

        def op(fwd: str, bwd: str):
            class Op(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, comm):
                    ctx.comm = comm
                    return x.view_as(x) if fwd == "identity" else comm.run(fwd, x, "forward")

                @staticmethod
                def backward(ctx, g):
                    return (g if bwd == "identity" else ctx.comm.run(bwd, g, "backward")), None
            return Op.apply

        _OPS = {"f": op("identity", "all_reduce"), "g": op("all_reduce", "identity"),
                "gather": op("all_gather", "reduce_scatter"),
                "scatter": op("reduce_scatter", "all_gather")}
    return _OPS


def _full_block(cfg: dict):
    """The whole block and its data, identical on every rank for a given seed."""
    import torch
    from torch import nn

    s, b, d, h = cfg["seq"], cfg["batch"], cfg["d_model"], cfg["hidden"]
    torch.manual_seed(cfg["seed"])
    block = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, h), nn.GELU(), nn.Linear(h, d))
    with torch.no_grad():                    # non-trivial LN affine, so its grads mean something
        block[0].weight.add_(0.1 * torch.randn(d))
        block[0].bias.add_(0.1 * torch.randn(d))
    x = torch.randn(s, b, d)
    grad_out = torch.randn(s, b, d)          # dL/d(output): the same upstream gradient everywhere
    return block, x, grad_out


class _SavedLog:
    """saved_tensors_hooks that note every non-parameter tensor kept for backward, once."""

    def __init__(self, params):
        self.skip = {p.data_ptr() for p in params}
        self.seen: set = set()
        self.rows: list[dict] = []
        self.region = "layernorm"

    def pack(self, t):
        key = (t.data_ptr(), tuple(t.shape))
        if t.data_ptr() not in self.skip and key not in self.seen:
            self.seen.add(key)
            self.rows.append(dict(region=self.region, shape=list(t.shape),
                                  bytes=t.numel() * t.element_size()))
        return t


def _shard_step(cfg: dict, rank: int, n: int, group, mode: str) -> tuple[dict, dict]:
    """One forward + backward of the sharded block; (measurements, tensors for the check)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    full, x_full, g_full = _full_block(cfg)
    h = cfg["hidden"] // n
    rows = slice(rank * h, (rank + 1) * h)
    p = {"ln.weight": full[0].weight, "ln.bias": full[0].bias,
         "fc1.weight": full[1].weight[rows], "fc1.bias": full[1].bias[rows],     # column-parallel
         "fc2.weight": full[3].weight[:, rows], "fc2.bias": full[3].bias}       # row-parallel
    p = {k: nn.Parameter(v.detach().clone()) for k, v in p.items()}
    tok = slice(rank * cfg["seq"] // n, (rank + 1) * cfg["seq"] // n) if mode == "tp+sp" else slice(None)
    x = x_full[tok].clone().requires_grad_(True)
    comm, ops, saved = _Comm(group, n, mode), _ops(), _SavedLog(p.values())
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
        y = F.layer_norm(x, (cfg["d_model"],), p["ln.weight"], p["ln.bias"])
        saved.region = "mlp"
        y = ops["gather"](y, comm) if mode == "tp+sp" else ops["f"](y, comm)
        hidden = F.gelu(F.linear(y, p["fc1.weight"], p["fc1.bias"]))    # (S, B, H/N): local
        partial = F.linear(hidden, p["fc2.weight"])                      # partial sums of fc2
        out = (ops["scatter"] if mode == "tp+sp" else ops["g"])(partial, comm) + p["fc2.bias"]
    out.backward(g_full[tok])
    if mode == "tp+sp":                      # these saw only this rank's tokens: sum them, at once
        names = ("ln.weight", "ln.bias", "fc2.bias")
        summed = comm.run("all_reduce", torch.cat([p[k].grad for k in names]), "grad sync")
        for k, g in zip(names, summed.split(cfg["d_model"])):
            p[k].grad = g
    meas = dict(mode=mode, tp_size=n, rank=rank,
                param_shapes={k: list(v.shape) for k, v in p.items()},
                param_bytes={k: v.numel() * v.element_size() for k, v in p.items()},
                collectives=comm.log, saved=saved.rows)
    tensors = {"output": out.detach(), "input grad": x.grad}
    tensors.update({k: v.grad for k, v in p.items()})
    return meas, tensors


def _reassemble(shards: list[dict], mode: str) -> dict:
    """Full tensors from every rank's pieces: the inverse of how `_shard_step` sliced them."""
    import torch

    out = {k: shards[0][k] for k in ("ln.weight", "ln.bias", "fc2.bias")}
    out["fc1.weight"] = torch.cat([s["fc1.weight"] for s in shards], 0)
    out["fc1.bias"] = torch.cat([s["fc1.bias"] for s in shards], 0)
    out["fc2.weight"] = torch.cat([s["fc2.weight"] for s in shards], 1)
    for k in ("output", "input grad"):
        out[k] = torch.cat([s[k] for s in shards], 0) if mode == "tp+sp" else shards[0][k]
    return out


def _reference(cfg: dict) -> dict:
    """One process, plain modules, the same weights, input and upstream gradient."""
    block, x, grad_out = _full_block(cfg)
    x.requires_grad_(True)
    out = block(x)
    out.backward(grad_out)
    names = {"0.weight": "ln.weight", "0.bias": "ln.bias", "1.weight": "fc1.weight",
             "1.bias": "fc1.bias", "3.weight": "fc2.weight", "3.bias": "fc2.bias"}
    res = {names[k]: v.grad for k, v in block.named_parameters()}
    res.update({"output": out.detach(), "input grad": x.grad})
    return res


def rounding_bounds(cfg: dict) -> dict[str, float]:
    """Per compared quantity, how far float32 re-ordering alone can move it: splitting the
    block re-orders its sums — LayerNorm's over d_model, fc1's dot products over d_model, fc2's
    over hidden (forward and backward), each weight gradient's sum over the seq × batch tokens —
    scaled by the largest reference value (dpviz.core.rounding)."""
    from dpviz.core.rounding import sum_order_bound

    sums = 2 * (2 * cfg["d_model"] + cfg["hidden"]) + cfg["seq"] * cfg["batch"]
    return {name: sum_order_bound(sums, float(t.abs().max())) for name, t in _reference(cfg).items()}


def tp_block_rank(ctx: RankContext, cfg: dict, tp_size: int) -> dict | None:
    """TP and TP+SP on the first `tp_size` ranks; rank 0 checks both against one process."""
    import torch.distributed as dist

    if tp_size > ctx.world_size:
        raise ValueError(f"TP size {tp_size} needs at least that many ranks, have {ctx.world_size}")
    group = dist.group.WORLD if tp_size == ctx.world_size else dist.new_group(list(range(tp_size)))
    if ctx.rank >= tp_size:
        return None
    rows, full = [], {}
    for mode in MODES:
        meas, tensors = _shard_step(cfg, ctx.rank, tp_size, group, mode)
        rows.append(meas)
        everyone = [None] * tp_size
        dist.all_gather_object(everyone, tensors, group=group)   # for the check only, not logged
        full[mode] = _reassemble(everyone, mode)
    checks = []
    if ctx.rank == 0:
        ref = _reference(cfg)
        for mode, against, other in (("tp", "single process", ref), ("tp+sp", "single process", ref),
                                     ("tp+sp", "tp", full["tp"])):
            checks.append(dict(tp_size=tp_size, mode=mode, against=against,
                               max_abs_diff={k: float((full[mode][k] - other[k]).abs().max())
                                             for k in other}))
    return dict(rows=rows, checks=checks)


# --- in the parent -----------------------------------------------------------------------------

def measure_tensor_parallel(*, cluster: Cluster | None = None, world_size: int = 4,
                            tp_sizes: tuple[int, ...] | None = None, seq: int = 16, batch: int = 2,
                            d_model: int = 32, hidden: int = 128, seed: int = 0) -> TensorParallelRecord:
    """Run the block under TP and TP+SP at each TP size (default: each of 1..cluster size
    that divides seq and hidden) on live ranks (the warm `cluster`, or `world_size` fresh ones)."""
    size = cluster.world_size if cluster is not None else world_size
    for name, value in (("seq", seq), ("batch", batch), ("d_model", d_model), ("hidden", hidden)):
        require_int(name, value, 1)
    tp_sizes = tuple(tp_sizes or (n for n in range(1, size + 1) if seq % n == 0 == hidden % n))
    for n in tp_sizes:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= size:
            raise ValueError(f"TP sizes must be whole numbers from 1 to {size}, got {n!r}")
        if seq % n or hidden % n:
            raise ValueError(f"TP size {n} must divide seq ({seq}) and hidden ({hidden})")
    cfg = dict(seq=seq, batch=batch, d_model=d_model, hidden=hidden, seed=seed)
    with using_cluster(cluster, size) as live:
        per_size = [live.run_task(tp_block_rank, cfg, n) for n in tp_sizes]
    ranks, checks = [], []
    for results in per_size:
        for res in results:
            if res is None:
                continue
            ranks += [TPRank(mode=r["mode"], tp_size=r["tp_size"], rank=r["rank"],
                             param_shapes={k: tuple(v) for k, v in r["param_shapes"].items()},
                             param_bytes=r["param_bytes"],
                             collectives=tuple(Collective(**c) for c in r["collectives"]),
                             saved=tuple(SavedTensor(s["region"], tuple(s["shape"]), s["bytes"])
                                         for s in r["saved"]))
                      for r in res["rows"]]
            checks += [EqualityCheck(**c) for c in res["checks"]]
    return TensorParallelRecord(config=cfg, ranks=tuple(ranks), checks=tuple(checks))

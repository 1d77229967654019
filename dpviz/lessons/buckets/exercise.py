"""Exercise 3: pack gradients into buckets as DDP's rebuild does.

    def assign_buckets(param_bytes: list[int], bucket_cap_mb: float | None) -> list[list[int]]:
        '''Parameter indices per bucket, in the order DDP fills them.'''

`param_bytes` lists each parameter's gradient bytes in definition order
(`model.parameters()`). DDP packs gradients in the order they become ready — about the
reverse of that — greedily: a gradient joins the current bucket, and the bucket closes as
soon as it holds at least its cap (so one large gradient may overshoot it). The cap is
`bucket_cap_mb` MiB; only when it is None (DDP's default: 25 MiB) is the first bucket capped
at 1 MiB instead (`dist._DEFAULT_FIRST_BUCKET_BYTES`), so the last layers start their
all-reduce early.

Your function runs here, in the notebook's process (it is pure arithmetic); the reference,
torch's own assignment (`dpviz.engine.torch_gate.bucket_assignment`), runs on a live rank, on several
models. Named mistakes: a bucket closed one gradient late (`>` instead of `>=`), packing in
definition order, and the first-bucket cap missing (or applied to an explicit cap).
"""
from __future__ import annotations

from typing import Callable

from dpviz.core.bucket_layout import MIB, assign_buckets as model_assign, cap_limits
from dpviz.engine.launch import Cluster, using_cluster
from dpviz.lessons.buckets.live import torch_assignment
from dpviz.lessons.exercises.core import choose, not_written, raised, require_callable
from dpviz.lessons.buckets.records import BucketCase, BucketsCheck
from dpviz.lessons.exercises.records import Verdict

EXERCISE = "bucket assignment"
NAME = "assign_buckets"
EXERCISE_FACADE = ("check_buckets",)  # what `dpviz.lessons.exercises.<name>` offers from here


def mlp_bytes(layers: int, width: int) -> list[int]:
    """`layers` × Linear(width, width) and a Linear(width, 1) head: weight, bias, … (float32)."""
    return [b for _ in range(layers) for b in (4 * width * width, 4 * width)] + [4 * width, 4]


def tiny_transformer_bytes(vocab: int = 1000, d: int = 64, blocks: int = 2) -> list[int]:
    """Token and position embeddings, then per block: LayerNorm, qkv, proj, LayerNorm, MLP."""
    block = [4 * d, 4 * d, 4 * d * 3 * d, 4 * 3 * d, 4 * d * d, 4 * d, 4 * d, 4 * d,
             4 * d * 4 * d, 4 * 4 * d, 4 * 4 * d * d, 4 * d]
    return [4 * vocab * d, 4 * 128 * d] + block * blocks


# (model, param bytes, bucket_cap_mb): 263168 B = one 256-wide layer's weight + bias exactly,
# so a bucket that fills its cap to the byte separates `>=` from `>`.
CASES = (
    ("MLP 24×256, DDP's default cap", mlp_bytes(24, 256), None),
    ("MLP 24×256, cap = one layer exactly", mlp_bytes(24, 256), 263168 / MIB),
    ("MLP 4×512, cap 1 MiB", mlp_bytes(4, 512), 1.0),
    ("tiny transformer, cap 0.1 MiB", tiny_transformer_bytes(), 0.1),
)


def torch_cases(cluster: Cluster) -> list[BucketCase]:
    """torch's assignment of every case, on a live rank (ready order: reverse definition)."""
    cases = []
    for model, sizes, cap in CASES:
        order = list(range(len(sizes)))[::-1]
        buckets = cluster.run_task(torch_assignment, sizes, order, cap_limits(cap))[0]
        cases.append(BucketCase(model, cap, tuple(sizes), tuple(tuple(b) for b in buckets)))
    return cases


def _packed(sizes, limits) -> list[list[int]]:
    """dpviz's model of the packing, in parameter indices, ready order = reverse."""
    order = list(range(len(sizes)))[::-1]
    return [[order[p] for p in b] for b in model_assign([sizes[i] for i in order], limits)]


def judge(case: BucketCase, yours: list[list[int]], checked: str) -> Verdict:
    """Why `yours` differs from torch's packing of one case."""
    mine = [list(b) for b in yours]
    flat = [i for b in mine for i in b]
    where = f"{case.model}: "
    if sorted(flat) != list(range(len(case.param_bytes))):
        return Verdict(EXERCISE, False, checked, "not_a_partition",
                       where + "every parameter index must appear in exactly one bucket",
                       "return a list of buckets, each a list of parameter indices")
    if flat == sorted(flat) and len(flat) > 1:
        return Verdict(EXERCISE, False, checked, "forward_order",
                       where + "you packed gradients in definition order; DDP packs them in the order "
                       "they become ready, the reverse (the last layer's gradient is ready first)",
                       "walk param_bytes from the last index to the first")
    ref = [list(b) for b in case.torch]
    k = next(i for i, (a, b) in enumerate(zip(mine + [[]] * len(ref), ref + [[]] * len(mine))) if a != b)
    limits = cap_limits(case.bucket_cap_mb)
    limit = limits[min(k, len(limits) - 1)]
    held = sum(case.param_bytes[i] for i in ref[k]) if k < len(ref) else 0
    if k + 1 < len(ref) and k < len(mine) and mine[k] == ref[k] + ref[k + 1][:1] and held == limit:
        return Verdict(EXERCISE, False, checked, "off_by_one",
                       where + f"bucket {k} held exactly its cap ({limit} B) and DDP closed it; yours "
                       "took one more gradient",
                       "close a bucket as soon as it holds at least the cap (>=), not once it exceeds it (>)")
    if case.bucket_cap_mb is None and mine == _packed(case.param_bytes, limits[1:]):
        return Verdict(EXERCISE, False, checked, "no_first_cap",
                       where + f"with bucket_cap_mb=None DDP caps the first bucket at {limits[0]} B "
                       "(1 MiB); yours filled it to 25 MiB",
                       "with bucket_cap_mb None, use 1 MiB for bucket 0 and 25 MiB after it")
    if case.bucket_cap_mb is not None and mine == _packed(case.param_bytes, cap_limits(None)[:1] + limits):
        return Verdict(EXERCISE, False, checked, "first_cap_always",
                       where + "an explicit bucket_cap_mb caps every bucket, the first one too; yours "
                       "capped the first at 1 MiB",
                       "apply the 1 MiB first-bucket cap only when bucket_cap_mb is None")
    return Verdict(EXERCISE, False, checked, "wrong_buckets",
                   where + f"bucket {k}: yours holds {mine[k] if k < len(mine) else []}, torch's "
                   f"{ref[k] if k < len(ref) else []}",
                   "the figure shows both packings, bytes to scale")


def called_with(case: BucketCase) -> str:
    """What the crashing call was given: the one thing a hint can state for certain."""
    return (f"this case called it with {len(case.param_bytes)} ints in param_bytes and "
            f"bucket_cap_mb={case.bucket_cap_mb!r}"
            + (" (DDP's default: None means 25 MiB, the first bucket 1 MiB)" if case.bucket_cap_mb is None else ""))


def check_buckets(fn: Callable | None = None, *, cluster: Cluster | None = None) -> BucketsCheck:
    """Run `fn(param_bytes, bucket_cap_mb)` on every case and compare with torch's packing."""
    if fn is not None:
        require_callable(fn)      # it runs here, in this process: it need not travel
    with using_cluster(cluster, 2) as ranks:
        return _check_buckets_on(ranks, fn)


def _check_buckets_on(cluster: Cluster, fn: Callable | None) -> BucketsCheck:
    cases = torch_cases(cluster)
    fn, checked = choose(fn, NAME)
    if fn is None:
        return BucketsCheck(not_written(EXERCISE, NAME), tuple(cases))
    for i, case in enumerate(cases):
        try:
            yours = [tuple(int(p) for p in b) for b in fn(list(case.param_bytes), case.bucket_cap_mb)]
        except Exception as err:  # the learner's code, run here: report, do not crash the notebook
            return BucketsCheck(Verdict(EXERCISE, False, checked, "error",
                                        f"{case.model}: {raised(err, fn)}", called_with(case)), tuple(cases))
        cases[i] = BucketCase(case.model, case.bucket_cap_mb, case.param_bytes, case.torch, tuple(yours))
        if list(yours) != list(case.torch):
            return BucketsCheck(judge(cases[i], yours, checked), tuple(cases), i)
    return BucketsCheck(Verdict(EXERCISE, True, checked,
                                message=f"same buckets as torch on all {len(cases)} models"), tuple(cases))

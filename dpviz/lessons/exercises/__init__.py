"""Exercises: you write the function, live gloo ranks check it against a reference.

Five exercises, each in its subject's package (`dpviz/lessons/<subject>/exercise.py`) and in the
notebook that teaches the subject, its check record and figure beside the subject's own;
what they share (running and checking an attempt, the verdict, the report) is here:

=====================  ====================================================  ========
exercise               you write                                             notebook
=====================  ====================================================  ========
ring all-reduce        ``ring_all_reduce(buf, comm)``                        02
gradient hook          ``average_gradient(param, comm)``                     07
bucket assignment      ``assign_buckets(param_bytes, bucket_cap_mb)``        03
accumulation           ``accumulate(ddp, micro_batches, loss_fn)``           04
ZeRO-1 step            ``zero1_step(params, grad, state, comm)``             09
=====================  ====================================================  ========

Each ``check_*`` returns a record (verdict + what the figure draws; plain data, saves as
JSON); ``report(check)`` prints the verdict (pass, or the first thing wrong with a hint) and
draws yours beside the reference when they differ. Classic mistakes are named: the
tutorial's unchunked ring, picotron #39 (averaging the parameter, not its gradient), a
missing 1/world_size or 1/K, ``no_sync`` around backward only, a bucket closed one
gradient late, a ZeRO step that forgets to all-gather.

Solutions: ``dpviz/lessons/exercises/solutions/`` holds a reference answer per exercise. A checker
runs it instead of your function when your function is still the starter (its body only
raises NotImplementedError or is ``...``) or when the environment sets DPVIZ_SOLUTIONS=1 —
that is how CI runs the notebooks. The checkers never need the solutions (they compare with
dpviz's own references), so a teacher hands out the notebooks without solutions by deleting
that folder from the copy the students install.
"""
from __future__ import annotations

import importlib

from dpviz.core.discover import PACKAGE, facade_exports

# Each exercise module declares what it offers in `EXERCISE_FACADE` (its `check_*`; `records`
# offers Verdict, `show` report): a sixth exercise is one new module, found here.
_EXPORTS = facade_exports(PACKAGE, "EXERCISE_FACADE")
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{PACKAGE.name}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value

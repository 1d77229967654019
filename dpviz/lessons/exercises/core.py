"""What every exercise shares: shipping the learner's function to the ranks, the `Comm`
recorder it talks through, choosing learner code or the shipped solution (the `Verdict` is a
record: `records.py`).

A learner's function is defined in a notebook cell, so spawned ranks cannot import it by
name. It travels as its source text instead and is executed on each rank in a namespace
holding `torch`, `dist` (torch.distributed), `nn` and `math`: a function that uses any
other notebook name must import it inside its body. A function defined in a module
(the shipped solutions, the tests' known-wrong versions) travels by name.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import linecache
import os
import re
import textwrap
import traceback
from typing import Any, Callable

from dpviz.lessons.exercises.records import FORCED, NOTHING, NO_FUNCTION, STARTER, Verdict, YOURS

SOLUTIONS_ENV = "DPVIZ_SOLUTIONS"   # "1": check the shipped solution instead of the learner's code
EXERCISE_TIMEOUT_S = 30.0           # a deadlocked ring hangs: fail within this, naming the rank


# --- which code runs --------------------------------------------------------------------

def is_starter(fn: Callable) -> bool:
    """True if `fn`'s body is still the starter: only a docstring, `...`, `pass` or
    `raise NotImplementedError`."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0].body if tree.body and hasattr(tree.body[0], "body") else []
    for stmt in body:
        if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            continue
        if isinstance(stmt, ast.Raise) and "NotImplementedError" in ast.unparse(stmt):
            continue
        return False
    return True


def choose(fn: Callable | None, name: str) -> tuple[Callable | None, str]:
    """(function to check, whose code it is: YOURS, or why the shipped solution
    `solutions.<name>` runs in its place — `fn` still the starter, missing, or
    DPVIZ_SOLUTIONS=1); (None, NOTHING) if the solutions are not installed (a teacher removed
    `dpviz/lessons/exercises/solutions/`)."""
    if fn is None:
        why = NO_FUNCTION
    elif is_starter(fn):
        why = STARTER
    elif os.environ.get(SOLUTIONS_ENV) == "1":
        why = FORCED
    else:
        return fn, YOURS
    try:
        module = importlib.import_module(f"{__package__}.solutions.{name}")
    except ModuleNotFoundError:
        return None, NOTHING
    return getattr(module, name), why


def not_written(exercise: str, name: str) -> Verdict:
    return Verdict(exercise, False, NOTHING, "not_written",
                   f"`{name}` is still the starter, and this install has no shipped solutions.",
                   "fill in the function, run its cell, then run the check again")


# --- shipping a function to the ranks -----------------------------------------------------

def require_callable(fn) -> None:
    """The learner passed their function, not its result or its name."""
    if not callable(fn):
        raise ValueError(f"pass the function itself, got {type(fn).__name__}")


def portable(fn: Callable) -> tuple:
    """A picklable description of `fn`: by name if importable, else its source text."""
    require_callable(fn)
    if getattr(fn, "__module__", "__main__") not in ("__main__", None) and "<locals>" not in fn.__qualname__:
        return ("import", fn.__module__, fn.__qualname__)
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as err:
        raise ValueError(f"cannot read the source of {fn.__qualname__} ({err}): define it with "
                         "`def` in a notebook cell or a module") from None
    return ("source", fn.__name__, source)


def check_attempt(fn: Callable | None, name: str) -> None:
    """Before any rank starts: the code `run_attempt` would ship (`fn`, or the solution in its
    place) can travel to the ranks; else the same ValueError `portable` gives."""
    chosen, _ = choose(fn, name)
    if chosen is not None:
        portable(chosen)


def source_filename(name: str) -> str:
    """The file name a learner's function shipped as source is compiled under on a rank."""
    return f"<your {name}>"


def resolve(spec: tuple) -> Callable:
    """Rank side: the function `portable` described."""
    import math

    import torch
    import torch.distributed as dist

    if spec[0] == "import":
        obj: Any = importlib.import_module(spec[1])
        for part in spec[2].split("."):
            obj = getattr(obj, part)
        return obj
    filename = source_filename(spec[1])
    # a traceback through the learner's code then quotes their line, as it would in the notebook
    linecache.cache[filename] = (len(spec[2]), None, spec[2].splitlines(True), filename)
    namespace = {"torch": torch, "dist": dist, "nn": torch.nn, "math": math, "__name__": "learner"}
    exec(compile(spec[2], filename, "exec"), namespace)
    return namespace[spec[1]]


def run_attempt(cluster, task: Callable, fn: Callable | None, exercise: str, name: str,
                *args) -> tuple[list | None, Verdict | None, str]:
    """Run `task(ctx, portable(code), *args)` on every rank, where code is `fn` or the shipped
    solution. Returns (per-rank results, None, who wrote it), or (None, the verdict, ...) when
    there is nothing to run or a rank raised or hung."""
    from dpviz.engine.launch import RankError

    fn, checked = choose(fn, name)
    if fn is None:
        return None, not_written(exercise, name), checked
    try:
        return cluster.run_task(task, portable(fn), *args, timeout_s=EXERCISE_TIMEOUT_S), None, checked
    except RankError as err:  # the learner's code raised or hung: that is the verdict
        return None, crashed(exercise, checked, err, fn), checked


def failing_line(traceback_text: str, fn: Callable) -> tuple[int, str] | None:
    """(line number within `fn`, the line) of the last frame of `traceback_text` that runs in
    `fn`'s code — compiled from its source on a rank (line 1 is its `def`) or read from its
    file; None if no frame does."""
    shipped, file = source_filename(fn.__name__), getattr(fn.__code__, "co_filename", "")
    found = None
    lines = traceback_text.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r'\s*File "(.+)", line (\d+), in ', line)
        if match and match.group(1) in (shipped, file):
            first = 1 if match.group(1) == shipped else fn.__code__.co_firstlineno
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            found = (int(match.group(2)) - first + 1, "" if code.startswith("File ") else code)
    return found


def raised(err: BaseException, fn: Callable, traceback_text: str | None = None) -> str:
    """`Type: message`, then the learner's line that raised it where a frame of `fn` shows."""
    text = traceback_text or "".join(traceback.format_exception(err))
    where = failing_line(text, fn)
    last = text.rstrip().splitlines()[-1] if text.strip() else repr(err)
    if where is None:
        return last
    number, code = where
    return f"{last}\nat line {number} of your {fn.__name__}" + (f": {code}" if code else "")


def crashed(exercise: str, checked: str, err: Exception, fn: Callable) -> Verdict:
    """A rank raised or hung while running the learner's code: which rank, the exception,
    the line of theirs that raised it; a hint only where the cause is known."""
    from dpviz.engine.launch import RankTimeout

    if isinstance(err, RankTimeout):
        return Verdict(exercise, False, checked, "hang",
                       f"rank(s) {', '.join(map(str, err.ranks))} did not finish within "
                       f"{EXERCISE_TIMEOUT_S:g} s: a deadlock, every rank waiting in a recv "
                       "for a message nobody sent?",
                       "post sends with isend (non-blocking) before you recv, and make every "
                       "recv match a send of the same size from the rank you name")
    what = raised(err, fn, str(err))
    hint = ("fix that line, run its cell, then run the check again" if failing_line(str(err), fn) else
            "no line of your function is in the rank's traceback: the exception above is all that is known")
    if what.startswith("NameError") and portable(fn)[0] == "source":
        hint = ("your function runs in other processes, which only know torch, dist, nn and "
                "math: import anything else inside the function")
    return Verdict(exercise, False, checked, "error", f"rank {getattr(err, 'rank', '?')} raised {what}", hint)


# --- the recorder the learner talks through -----------------------------------------------

class Comm:
    """A thin wrapper of torch.distributed that records every call (rank side).

    Counting rules the exercises state: each `isend` or `send` adds its tensor's bytes to
    what this rank sent; each `recv` ends one step (`on_recv` runs first, so an exercise
    can snapshot the state the step starts from); collectives record their op and the
    tensor they were given.
    """

    def __init__(self, rank: int, world_size: int, on_recv: Callable[[], None] | None = None):
        self.rank = rank
        self.world_size = world_size
        self.calls: list[dict] = []
        self._on_recv = on_recv

    def _note(self, op: str, tensor, peer: int | None = None) -> None:
        self.calls.append(dict(op=op, peer=peer, nbytes=tensor.numel() * tensor.element_size(),
                               ptr=tensor.data_ptr(), numel=tensor.numel()))

    def isend(self, tensor, dst: int):
        import torch.distributed as dist

        self._note("send", tensor, dst)
        return dist.isend(tensor, dst)

    def send(self, tensor, dst: int) -> None:
        import torch.distributed as dist

        self._note("send", tensor, dst)
        dist.send(tensor, dst)

    def recv(self, tensor, src: int) -> None:
        import torch.distributed as dist

        if self._on_recv is not None:
            self._on_recv()
        self._note("recv", tensor, src)
        dist.recv(tensor, src)

    def all_reduce(self, tensor) -> None:
        import torch.distributed as dist

        self._note("all_reduce", tensor)
        dist.all_reduce(tensor)

    def all_gather(self, tensors: list, tensor) -> None:
        import torch.distributed as dist

        self._note("all_gather", tensor)
        dist.all_gather(tensors, tensor)

    def sent_bytes(self) -> int:
        return sum(c["nbytes"] for c in self.calls if c["op"] == "send")

    def count(self, op: str) -> int:
        return sum(c["op"] == op for c in self.calls)

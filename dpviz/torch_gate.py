"""The gate: every private torch call dpviz makes lives here, each with its fallback for the
torch releases pyproject admits (2.11 to 2.15) that lack or changed it.

Why one module: a private call is not a promise; when a release moves it, the fix is here,
and tests/test_torch_gate.py runs every fallback on whatever torch is installed, so the path a
learner's older or newer torch takes is tested too. No torch import at module level: the
parent side of a run imports this without torch.
"""
from __future__ import annotations

from typing import Sequence


def input_shapes(event) -> list:
    """A profiler event's input shapes as its chrome trace writes them (`Input Dims`): a
    TensorList's as the list of its tensors' shapes.

    `_KinetoEvent.structured_input_shapes` gives exactly that (torch 2.13 has it; 2.11 does
    not). Without it, `shapes()` gives a TensorList as [], which would read as a 0-d tensor
    of 4 bytes; `flat_input_shapes` gives None instead, so its bytes are unknown, as in any
    profile taken without shapes."""
    structured = getattr(event, "structured_input_shapes", None)
    if structured is not None:
        return structured()
    return flat_input_shapes(event.shapes(), event.dtypes())


def flat_input_shapes(shapes: Sequence, dtypes: Sequence[str]) -> list:
    """`input_shapes`' fallback: `shapes()` with each TensorList's entry None (unknown)."""
    return [None if dtype == "TensorList" else shape for shape, dtype in zip(shapes, dtypes)]


def has_list_shapes() -> bool:
    """Does this torch's profiler give a TensorList's shapes per event (`input_shapes`)?
    Where it does not, a bucket's all-reduce gets its size from the comm hook's notes
    (`dpviz.profile_events.reduce_profile`), as a profile without shapes does."""
    from torch._C._autograd import _KinetoEvent

    return hasattr(_KinetoEvent, "structured_input_shapes")

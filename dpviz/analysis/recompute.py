"""Recomputed forwards in a profiler trace: forward ops that ran again inside backward.

Activation checkpointing re-runs a segment's forward when backward first needs its saved
tensors; no event is named "recompute", so they are found by nesting. Used by the
checkpointing measurement and by every DDP run with `checkpoint_every` (trace analysis: no
torch, no subject).
"""
from __future__ import annotations

FORWARD_MARK = "dpviz:forward"
BACKWARD_NODE = "autograd::engine::evaluate_function: "
SEQUENCE = "Sequence number"   # a trace event's autograd sequence number (ops run with grad on)


def mark_window(events: list[dict], name: str) -> dict:
    """The trace event of dpviz's `name` annotation: the forward or backward it timed."""
    found = [e for e in events if e.get("ph") == "X" and e.get("name") == name]
    if not found:
        raise ValueError(f"trace has no {name!r} annotation: it was not recorded by dpviz")
    return found[0]


def _parents(events: list[dict]) -> list[int | None]:
    """Index of each event's enclosing event on the same thread (events sorted by start)."""
    parents: list[int | None] = []
    stacks: dict = {}
    for i, e in enumerate(events):
        stack = stacks.setdefault(e.get("tid"), [])
        while stack and e["ts"] >= events[stack[-1]]["ts"] + events[stack[-1]]["dur"]:
            stack.pop()
        parents.append(stack[-1] if stack else None)
        stack.append(i)
    return parents


def recompute_spans(trace: dict, forward_mark: str = FORWARD_MARK) -> list[tuple[float, float]]:
    """(start, end) µs of each recomputed forward: forward ops nested inside a backward node.

    The ops the forward ran at top level (aten::linear, aten::relu, …) run inside a backward
    node in plain backward only with grad off: it uses their derivatives (aten::mm,
    aten::threshold_backward) and a few of the same ops (a GPT's aten::add, aten::view)
    without building a graph. Under non-reentrant checkpointing they re-run when backward
    first unpacks a segment's saved tensor: `evaluate_function: ReluBackward0 → ReluBackward0
    → aten::linear …`. One span per backward node that triggered a recompute. `forward_mark`
    names the event whose direct children are the forward ops (DDP's own forward in a run).
    """
    events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e),
                    key=lambda e: (e["ts"], -e["dur"]))
    parents = _parents(events)
    fwd = events.index(mark_window(events, forward_mark))
    forward_ops = {e["name"] for e, p in zip(events, parents) if p == fwd}
    # With grad off an op carries no autograd sequence number; a recomputed op runs with grad
    # on and has one. Traces that record sequence numbers are read by that; others by name.
    numbered = any(SEQUENCE in e.get("args", {}) for e in events)
    by_node: dict[int, list[dict]] = {}
    for i, e in enumerate(events):
        if e["name"] not in forward_ops or (numbered and SEQUENCE not in e.get("args", {})):
            continue
        node, p = None, parents[i]
        while p is not None:
            if events[p]["name"] in forward_ops:
                break           # nested in another recomputed op: counted with its parent
            if events[p]["name"].startswith(BACKWARD_NODE):
                node = p
                break
            p = parents[p]
        if node is not None:
            by_node.setdefault(node, []).append(e)
    return [(min(e["ts"] for e in ops), max(e["ts"] + e["dur"] for e in ops))
            for _, ops in sorted(by_node.items())]

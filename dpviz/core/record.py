"""The data contract: frozen dataclasses ⇄ versioned JSON files.

A record is what a live run measured, in plain numbers and strings. It loads without torch,
so a record saved today renders tomorrow on a machine with no ranks. Every record kind
registers itself with `@record_kind("name")` where it is defined; `load()` dispatches on the
file's `kind` and, on first sight of a kind, imports the module `dpviz.core.discover` found it in.
"""
from __future__ import annotations

import dataclasses
import gzip
import importlib
import json
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dpviz.core.discover import record_modules
from dpviz.core.workloads import WorkloadInfo

FACADE = ("RunRecord", "RecordError", "load", "save")  # what `dpviz.<name>` offers from here

SCHEMA_VERSION = 1
T = TypeVar("T")
_KINDS: dict[str, type] = {}


class RecordError(ValueError):
    """A record file that is missing, corrupt, foreign or from another schema version."""


def record_kind(name: str, *, formerly: tuple[str, ...] = ()):
    """Class decorator: register a top-level record type under its JSON `kind`.

    `formerly` lists kinds the type was saved under before a rename: such files still load.
    """

    def register(cls):
        for kind in (name, *formerly):
            _KINDS[kind] = cls
        cls.KIND = name
        return cls

    return register


def to_dict(obj: Any) -> Any:
    """Dataclasses, tuples and dicts → JSON-ready values (tuples become lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if hasattr(type(obj), "KIND"):
            out = {"schema_version": SCHEMA_VERSION, "kind": type(obj).KIND, **out}
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def from_dict(cls: type[T], data: Any, where: str = "record") -> T:
    """Build `cls` from JSON values, checking shapes so a foreign file fails clearly."""
    return _convert(cls, data, where)


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, where)
            except RecordError as err:
                errors.append(str(err))
        raise RecordError(errors[0] if errors else f"{where}: unexpected null")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _convert(hints[f.name], value[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{where}: missing field {f.name!r}")
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise RecordError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(_convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        key_t, val_t = typing.get_args(tp)
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object, got {type(value).__name__}")
        return {_key(key_t, k, where): _convert(val_t, v, f"{where}[{k}]") for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise RecordError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    if tp is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object, got {type(value).__name__}")
        return value
    raise RecordError(f"{where}: cannot read type {tp!r}")


def _key(key_t: type, key: str, where: str):
    """JSON object keys are strings; rank-keyed dicts turn them back into ints."""
    if key_t is not int:
        return key
    try:
        return int(key)
    except ValueError:
        raise RecordError(f"{where}: key {key!r} is not a whole number") from None


def save(record: Any, path: str | os.PathLike) -> Path:
    """Write a registered record as JSON (never pickle); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_dict(record), indent=1, allow_nan=False) + "\n")
    return path


def read_json(path: str | os.PathLike) -> Any:
    """Read JSON or gzipped JSON, turning every way it can fail into a RecordError."""
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"no such file: {path}")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"{path} is not readable JSON ({type(err).__name__}: {err})") from None


def load(path: str | os.PathLike, expect: type[T] | None = None) -> T:
    """Load any registered record; `expect` checks it is the kind the caller wants."""
    data = read_json(path)
    if not isinstance(data, dict) or "kind" not in data or "schema_version" not in data:
        raise RecordError(f"{path} is not a dpviz record (no 'kind'/'schema_version' fields)")
    if data["schema_version"] != SCHEMA_VERSION:
        raise RecordError(f"{path} has schema_version {data['schema_version']!r}; "
                          f"this dpviz reads version {SCHEMA_VERSION}: re-run to record it again")
    kind = data["kind"]
    if not isinstance(kind, str):
        raise RecordError(f"{path}: 'kind' must be a string, got {kind!r}")
    if kind not in _KINDS and kind in record_modules():
        importlib.import_module(record_modules()[kind])
    cls = _KINDS.get(kind)
    if cls is None:
        raise RecordError(f"{path} has unknown kind {data['kind']!r}; known: {sorted(_KINDS)}")
    if expect is not None and cls is not expect:
        raise RecordError(f"{path} holds a {data['kind']!r} record, expected {expect.KIND!r}")
    body = {k: v for k, v in data.items() if k not in ("kind", "schema_version")}
    return from_dict(cls, body, where=Path(path).name)


# --- the live DDP run record -------------------------------------------------------------

SPAN_KINDS = ("step", "micro_step", "bucket_hook", "link", "forward", "backward", "recompute", "allreduce_launch", "allreduce",
              "collective", "optimizer", "compute", "memcpy", "other")


@dataclass(frozen=True)
class Span:
    """One timed interval of one rank on the common trace clock (µs)."""

    rank: int
    tid: str          # thread (CPU) or stream (GPU) it ran on
    name: str
    kind: str         # one of SPAN_KINDS
    start_us: float
    end_us: float
    step: int | None = None
    bytes: int | None = None
    bucket: int | None = None
    op: str | None = None  # communication spans: the collective (one of trace.COMM_OPS)
    group: str | None = None  # ... and its process group, when the trace names it (NCCL)
    seq: int | None = None    # ... and its sequence number in that group, when the trace has it

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class Bucket:
    """One DDP gradient bucket as the comm hook saw it on one rank in one step."""

    rank: int
    step: int
    micro_step: int
    index: int
    numel: int
    bytes: int
    params: tuple[str, ...]
    hook_us: float    # when DDP handed the bucket to the hook (trace clock)


@dataclass(frozen=True)
class MicroStep:
    """One forward+backward; with accumulation only the last of a step all-reduces."""

    step: int
    micro_step: int
    all_reduces: int  # counted from rank 0's trace
    start_us: float = 0.0
    end_us: float = 0.0


@dataclass(frozen=True)
class StepCheck:
    """DDP = large-batch SGD, checked: max |Δparam| across ranks and vs one process."""

    step: int
    max_diff_across_ranks: float          # exactly 0: every rank receives the same all-reduce
    max_diff_vs_single_process: float     # float32 rounding: re-ordered sums
    rounding_bound: float | None = None   # what rounding can reach by this step (dpviz.core.rounding)
    reference: str = "the concatenated batch at once"   # what the single process computed


@record_kind("ddp_run")
@dataclass(frozen=True)
class RunRecord:
    """Everything one live DDP run measured, on every rank."""

    config: dict
    world_size: int
    spans: tuple[Span, ...]
    buckets: tuple[Bucket, ...]
    micro_steps: tuple[MicroStep, ...]
    losses: dict[int, tuple[float, ...]]          # rank → loss per optimizer step
    checks: tuple[StepCheck, ...]
    ddp_logging: dict[int, dict]                   # rank → DDP's logging data (torch_gate.ddp_logging_data)
    step_wall_ms: dict[int, tuple[float, ...]] = field(default_factory=dict)  # rank → per step
    param_names: tuple[str, ...] = ()
    param_bytes: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default=())
    rank_labels: dict[int, str] = field(default_factory=dict)   # e.g. "1:0 (rank 2)": node:local
    workload: WorkloadInfo | None = None           # what was trained: name, parameters, buffers

    def spans_of(self, rank: int | None = None, kind: str | None = None,
                 step: int | None = None) -> list[Span]:
        """Filter spans; None means any."""
        return [s for s in self.spans
                if (rank is None or s.rank == rank) and (kind is None or s.kind == kind)
                and (step is None or s.step == step)]

    @property
    def steps(self) -> list[int]:
        return sorted({s.step for s in self.spans if s.kind == "step" and s.step is not None})

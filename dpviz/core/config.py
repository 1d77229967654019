"""Run configuration: one frozen object per live run, validated before anything spawns.

Every message a user sees for bad input lives here, so the CLI, the notebooks and the
library reject the same things with the same words.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from dpviz.core.link import Link, as_link

FACADE = ("RunConfig",)  # what `dpviz.<name>` offers from here

BACKENDS = ("gloo", "nccl")
# Where ranks compute: gloo ranks on CPU, or (device="cuda") on GPUs, several ranks sharing
# one where there are fewer GPUs than ranks; NCCL ranks each own one GPU.
DEVICES = ("cpu", "cuda")
# Where no_sync() goes during accumulation: around forward and backward (right), around
# backward only (the pitfall: forward already armed the all-reduce), or nowhere (forgotten).
NO_SYNC_SCOPES = ("forward_backward", "backward_only", "off")
# What the steps before `profile_from` run (RunConfig.warmup): "full" trains them as any step;
# "light" only has DDP rebuild its buckets (dpviz.engine.warm_ranks.warmup_step), and not even that where
# a warm rank already knows the workload's ready order (dpviz.engine.warm_ranks); FSDP's knobs run their
# warm-up step on WARMUP_SAMPLES samples with the link's wait off (dpviz.lessons.fsdp.live).
WARMUPS = ("full", "light")
# Samples per rank in a light warm-up: BatchNorm in train mode needs more than one value per
# channel, and a user's model already ran a forward on 2 samples (validate_model_spec).
WARMUP_SAMPLES = 2
# The built-in workloads (dpviz.engine.workloads); any other model is a user's "module:function".
BUILTIN_MODELS = ("mlp", "gpt", "cnn")
# Each built-in's size when layers/width/batch_per_rank are left unset: a 3-step, 2-rank
# run stays well under a second on a small CPU (benchmarks/workloads.py measures it).
MODEL_DEFAULTS = {"mlp": dict(layers=4, width=256, batch_per_rank=32),
                  "gpt": dict(layers=4, width=64, batch_per_rank=16),
                  "cnn": dict(layers=3, width=16, batch_per_rank=16)}
_SIZE_FIELDS = ("layers", "width", "batch_per_rank")


def max_cpu_ranks() -> int:
    """A sane cap for local CPU ranks: four per core (`os.cpu_count()`)."""
    return 4 * (os.cpu_count() or 1)


@dataclass(frozen=True)
class RunConfig:
    """What one live DDP run does. Defaults are the small CPU demo used by the notebooks."""

    world_size: int = 2
    steps: int = 3
    # None: the model's own size (MODEL_DEFAULTS); a user's model ignores layers and width
    layers: int | None = None   # blocks: MLP's Linear+ReLU, GPT's transformer, CNN's conv
    width: int | None = None    # hidden size: MLP features, GPT d_model, CNN channels
    batch_per_rank: int | None = None  # samples per rank per micro-step
    accum_steps: int = 1     # micro-steps per optimizer step (no_sync on all but the last)
    no_sync: str = "forward_backward"  # see NO_SYNC_SCOPES
    scale_loss: bool = True  # divide each micro-step's loss by accum_steps (False shows why)
    checkpoint_every: int = 0  # recompute activations in segments of k blocks (0 = keep all)
    bucket_cap_mb: float | None = 25.0  # None: DDP's own default (25 MiB, first bucket 1 MiB)
    lr: float = 0.1
    seed: int = 0
    backend: str = "gloo"
    profile: bool = True
    # steps before this one run unprofiled: a slider's figure draws the last step only, and
    # profiling DDP's first (one-bucket) step too cost up to a third of a move's rank time
    profile_from: int = 0
    # What the steps before profile_from run: "full" trains them as any step. "light" (a
    # slider's: the figure draws none of them) only has DDP rebuild its buckets from the
    # gradient-ready order of one synced backward: one micro-step on WARMUP_SAMPLES samples per
    # rank (a built-in model; a user's keeps its whole slice, its graph may depend on the data),
    # no all-reduce (the comm hook hands the buckets back: neither the emulated link nor gloo),
    # gradients dropped (no optimizer step), then DDP's rebuild itself, so the profiled steps
    # start from the initial weights as steady-state steps (the buckets, and no rebuild
    # broadcast, of a full run's step 2). It trains nothing, so it adds no loss and no wall
    # time; once a warm rank knows the workload's ready order, DDP starts with the rebuilt
    # buckets and the step is skipped (dpviz.engine.warm_ranks). Needs checks=False (the checks
    # compare every step).
    warmup: str = "full"
    # compare every step's parameters across ranks and with one process (record.checks); a
    # slider whose figure draws no check turns this off and its record says so (config.checks)
    checks: bool = True
    timeout_s: float = 120.0
    slow_rank: int | None = None  # this rank sleeps delay_ms in every forward: a straggler
    delay_ms: float = 0.0
    # An emulated wire for the all-reduces (dpviz.core.link): None is raw loopback, gloo on the
    # same cores as backward. Accepts a Link, a preset name ("10GbE", ...) or a dict.
    link: Link | None = None
    # What to train: "mlp", "gpt", "cnn" or a user's "package.module:function" returning a
    # dpviz.Workload (checked by dpviz.engine.workloads.validate_model_spec before ranks start).
    model: str = "mlp"
    # "cpu" or "cuda"; None: the backend's own (gloo → cpu, nccl → cuda). gloo with "cuda"
    # runs the ranks' tensors on GPUs and all-reduces them through gloo.
    device: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "link", as_link(self.link))  # a bad link fails here, early
        if self.device is None:
            object.__setattr__(self, "device", default_device(self.backend))
        defaults = MODEL_DEFAULTS.get(self.model, MODEL_DEFAULTS["mlp"])
        for name in _SIZE_FIELDS:
            if getattr(self, name) is None:
                object.__setattr__(self, name, defaults[name])

    def replace(self, **changes) -> "RunConfig":
        """A validated copy with some fields changed (the notebooks' knob). Changing the
        model resets the sizes not given to the new model's own; changing the backend resets
        the device, if not given, to the new backend's own."""
        if changes.get("model", self.model) != self.model:
            changes = {**{name: None for name in _SIZE_FIELDS}, **changes}
        if changes.get("backend", self.backend) != self.backend:
            changes = {"device": None, **changes}
        return validate(dataclasses.replace(self, **changes))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        """One line for a reader: the fields that differ from the defaults of its model (all
        of them are in `repr`), the link by its label."""
        base, default = RunConfig(model=self.model), RunConfig()
        changed = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                   if f.name != "link" and getattr(self, f.name) != getattr(base, f.name)
                   or f.name == "model" and self.model != default.model]
        link = as_link(self.link)
        return (f"RunConfig({', '.join(changed)})" + (f"; {link.label()}" if link is not None else "")
                + ("" if link is not None else "; raw loopback (no emulated link)"))

    @classmethod
    def from_dict(cls, data: dict) -> "RunConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown RunConfig fields {sorted(unknown)}; known: {sorted(known)}")
        return validate(cls(**data))


def require_int(name: str, value, low: int, high: int | None = None, hint: str = "") -> None:
    """A whole number in [low, high] (booleans are not numbers here), or one clear ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {bound}, got {value}{hint}")


def default_device(backend: str) -> str:
    """Where a backend's ranks compute unless told: NCCL on GPUs, gloo on CPU."""
    return "cuda" if backend == "nccl" else "cpu"


def validate_world_size(world_size, backend: str = "gloo", minimum: int = 1,
                        device: str | None = None) -> int:
    """Check a rank count, backend and device; returns the count. Torch-free, so the GPUs a
    "cuda" run needs are counted where ranks start (`dpviz.engine.launch.require_gpus`)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    device = default_device(backend) if device is None else device
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if backend == "nccl":
        if device != "cuda":
            raise ValueError(f"backend nccl runs on GPUs: device must be cuda, got {device!r}")
        require_int("ranks", world_size, minimum)
    else:
        cap = max_cpu_ranks()
        require_int("ranks", world_size, minimum, cap,
                    f" (this machine has {os.cpu_count()} cores; at most {cap} CPU ranks)")
    return world_size


def validate(cfg: RunConfig) -> RunConfig:
    """Reject a bad config with a message that says how to fix it; returns cfg."""
    validate_world_size(cfg.world_size, cfg.backend, device=cfg.device)
    validate_model_name(cfg.model)
    require_int("steps", cfg.steps, 1, 10_000)
    require_int("layers", cfg.layers, 1, 512)
    require_int("width", cfg.width, 1, 1 << 16)
    require_int("batch_per_rank", cfg.batch_per_rank, 1, 1 << 20)
    require_int("accum_steps", cfg.accum_steps, 1, 1024)
    require_int("profile_from", cfg.profile_from, 0, cfg.steps - 1,
                " (the step the profiler starts at: at least one step is profiled)")
    require_int("seed", cfg.seed, 0)
    require_int("checkpoint_every", cfg.checkpoint_every, 0, cfg.layers,
                 " (0 keeps every activation; k recomputes segments of k blocks)")
    if cfg.no_sync not in NO_SYNC_SCOPES:
        raise ValueError(f"no_sync must be one of {', '.join(NO_SYNC_SCOPES)}, got {cfg.no_sync!r}")
    if cfg.warmup not in WARMUPS:
        raise ValueError(f"warmup must be one of {', '.join(WARMUPS)}, got {cfg.warmup!r}")
    if cfg.warmup == "light" and cfg.checks is True:
        raise ValueError("warmup='light' skips the warm-up steps' optimizer step, so the parameter "
                         "checks (every step against one process) cannot hold: pass checks=False")
    for name in ("profile", "checks", "scale_loss"):
        if not isinstance(getattr(cfg, name), bool):
            raise ValueError(f"{name} must be True or False, got {getattr(cfg, name)!r}")
    _validate_straggler(cfg)
    for name in ("bucket_cap_mb", "lr", "timeout_s"):
        value = getattr(cfg, name)
        if name == "bucket_cap_mb" and value is None:
            continue  # DDP's default; an explicit cap also caps the first bucket (torch 2.13)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a number > 0, got {value!r}")
    return cfg


def for_slider(cfg: RunConfig) -> RunConfig:
    """What a slider's move runs: its figure draws the last step and no parameter check, so
    only the last step is profiled, the checks' all_gather is skipped, and the steps before it
    are light warm-ups in which DDP rebuilds its buckets (skipped once a warm rank knows the
    workload's ready order: DDP then starts with the rebuilt buckets), so the drawn step is a
    steady-state step (all three stay in each record's config)."""
    return cfg.replace(checks=False, profile_from=cfg.steps - 1, warmup="light")


def validate_mlp_only(cfg: RunConfig, subject: str) -> RunConfig:
    """`validate(cfg)` for a subject whose rank code trains the built-in MLP only: another
    model would be ignored while the record names it, so it is refused here."""
    validate(cfg)
    if cfg.model != "mlp":
        raise ValueError(f"{subject} trains the built-in MLP only, got model={cfg.model!r}: "
                         "leave model unset (\"mlp\")")
    return cfg


def validate_model_name(model) -> str:
    """A built-in name or the form "package.module:function" (importing it is the run side's
    job: a record names a user's model without needing it)."""
    if model in BUILTIN_MODELS:
        return model
    module, sep, function = model.partition(":") if isinstance(model, str) else ("", "", "")
    if not (sep and function.isidentifier()
            and all(part.isidentifier() for part in module.split("."))):
        raise ValueError(f"model must be one of {', '.join(BUILTIN_MODELS)} or MODULE:FUNCTION "
                         f"(a function returning a dpviz.Workload), got {model!r}")
    return model


def _validate_straggler(cfg: RunConfig) -> None:
    """--slow-rank R --delay-ms D: a rank that exists, a delay in 0..10 s, both or neither."""
    if cfg.slow_rank is None:
        if cfg.delay_ms:
            raise ValueError(f"delay_ms={cfg.delay_ms} needs slow_rank (which rank to slow down)")
        return
    require_int("slow_rank", cfg.slow_rank, 0, cfg.world_size - 1,
                 f" (the job has ranks 0..{cfg.world_size - 1})")
    d = cfg.delay_ms
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 < d <= 10_000:
        raise ValueError(f"delay_ms must be a number of ms in (0, 10000] with slow_rank, got {d!r}")


def writable_dir(path: str | os.PathLike) -> Path:
    """Create an output folder or say clearly why it cannot be written."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output path {out} exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot create output folder {out}: {err.strerror}") from None
    if not os.access(out, os.W_OK):
        raise ValueError(f"output folder {out} is not writable")
    return out

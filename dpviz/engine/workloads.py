"""What a live run trains: a `Workload` (model, deterministic global batch, loss).

Three are built in (`mlp`, `gpt`, `cnn`); a user brings their own as `MODULE:FUNCTION`, a
function with no arguments that returns a `Workload`, or defines that function in a notebook
cell and passes `model_spec(function)`: its source is shipped as a module the ranks import
(`cell_<hash>:function`, a name a record keeps as readable JSON). The global batch is a pure
function of (step, micro_step, size): every rank rebuilds it and takes its own slice, and one
process rebuilds the concatenated batch — which is how the DDP = large-batch SGD claim is checked.
"""
from __future__ import annotations

import ast
import atexit
import contextlib
import dataclasses
import dis
import functools
import hashlib
import importlib
import inspect
import linecache
import os
import shutil
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from dpviz.core.config import BUILTIN_MODELS, RunConfig
from dpviz.core.rounding import max_abs, mlp_sums, network_sums, sgd_bound
from dpviz.core.workloads import WorkloadInfo, describe_params
from dpviz.engine.launch import pid_alive

FACADE = ("Workload",)  # what `dpviz.<name>` offers from here

Tensor = torch.Tensor
BatchFn = Callable[[int, int, int], tuple[Tensor, Tensor]]
BUILTIN = BUILTIN_MODELS


@dataclass(frozen=True)
class Workload:
    """A model and its data: `batch(step, micro_step, size)` returns the GLOBAL batch of `size`
    samples as (inputs, targets), the same on every call; ranks slice dim 0. `loss(outputs,
    targets)` is a scalar mean over the samples (None: mean squared error)."""

    model: nn.Module
    batch: BatchFn
    loss: Callable[[Tensor, Tensor], Tensor] | None = None
    name: str = "custom"


def _seed_of(seed: int, step: int, micro_step: int) -> int:
    """One generator seed per (seed, step, micro-step): batches never repeat across steps."""
    return seed * 1_000_003 + step * 1009 + micro_step


def run_blocks(blocks: nn.Module, x: Tensor, checkpoint_every: int) -> Tensor:
    """Run `blocks` in order; with k = `checkpoint_every` > 0 each segment of k blocks keeps
    only its input during forward and recomputes the rest in backward."""
    if not checkpoint_every:
        for block in blocks:
            x = block(x)
        return x
    from torch.utils.checkpoint import checkpoint

    for i in range(0, len(blocks), checkpoint_every):
        x = checkpoint(nn.Sequential(*blocks[i:i + checkpoint_every]), x, use_reentrant=False)
    return x


# --- mlp: Linear+ReLU blocks on synthetic regression data ------------------------------------

class MLP(nn.Sequential):
    """Linear+ReLU blocks then a Linear head; with `checkpoint_every = k`, each run of k
    blocks keeps only its input during forward and recomputes the rest in backward."""

    def __init__(self, *modules: nn.Module, checkpoint_every: int = 0):
        super().__init__(*modules)
        self.checkpoint_every = checkpoint_every

    @property
    def blocks(self) -> list[nn.Sequential]:
        """The repeated (Linear, ReLU) blocks, one module each, built from the registered
        layers on every access: parameters keep their names (`0.weight`, …), a hook goes on a
        block's layers, and a replica (`nn.DataParallel`'s `replicate` copies registered
        modules only) sees its own layers, never device 0's."""
        mods = list(self)[:-1]
        return [nn.Sequential(mods[i], mods[i + 1]) for i in range(0, len(mods), 2)]

    @property
    def head(self) -> nn.Linear:
        return self[-1]

    def forward(self, x: Tensor) -> Tensor:
        if not self.checkpoint_every:
            return super().forward(x)
        return self.head(run_blocks(self.blocks, x, self.checkpoint_every))


def build_mlp(cfg: RunConfig) -> MLP:
    """`layers` blocks of Linear+ReLU and a Linear head; same weights for a given seed."""
    torch.manual_seed(cfg.seed)
    blocks: list[nn.Module] = []
    for _ in range(cfg.layers):
        blocks += [nn.Linear(cfg.width, cfg.width), nn.ReLU()]
    blocks.append(nn.Linear(cfg.width, 1))
    return MLP(*blocks, checkpoint_every=cfg.checkpoint_every)


def mlp_batch(cfg: RunConfig) -> BatchFn:
    """Gaussian inputs (size, width) and a fixed random teacher's tanh outputs (size, 1)."""
    teacher = torch.randn(cfg.width, 1, generator=torch.Generator().manual_seed(cfg.seed + 7))

    def batch(step: int, micro_step: int, size: int) -> tuple[Tensor, Tensor]:
        gen = torch.Generator().manual_seed(_seed_of(cfg.seed, step, micro_step))
        x = torch.randn(size, cfg.width, generator=gen)
        return x, torch.tanh(x @ teacher / cfg.width ** 0.5)

    return batch


def global_batch(cfg: RunConfig, step: int, micro_step: int) -> tuple[Tensor, Tensor]:
    """The MLP's samples of all ranks for one micro-step, (world·batch, width), (world·batch, 1)."""
    return mlp_batch(cfg)(step, micro_step, cfg.world_size * cfg.batch_per_rank)


def loss_fn(pred: Tensor, target: Tensor) -> Tensor:
    """The default loss (mean squared error)."""
    return F.mse_loss(pred, target)


# --- gpt: a small decoder-only transformer on a deterministic token stream ------------------

GPT_CONTEXT = 16      # tokens per sample
GPT_VOCAB = 2048      # vocab·d_model·4 bytes: the embedding is 512 KiB at d_model = 64
GPT_HEAD_DIM = 32


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        B, T, d = x.shape
        q, k, v = (t.view(B, T, self.heads, d // self.heads).transpose(1, 2)   # (B, nh, T, hs)
                   for t in self.qkv(x).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, d))


class FeedForward(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), CausalSelfAttention(d, heads)
        self.ln2, self.mlp = nn.LayerNorm(d), FeedForward(d)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + position embeddings, `layers` blocks, a final LayerNorm and a linear head
    over the vocabulary (`tie_head`: the head reuses the token embedding's weight)."""

    def __init__(self, layers: int, d: int, vocab: int = GPT_VOCAB, context: int = GPT_CONTEXT,
                 checkpoint_every: int = 0, tie_head: bool = False):
        super().__init__()
        if d % GPT_HEAD_DIM and d >= GPT_HEAD_DIM:
            raise ValueError(f"the gpt workload needs width (d_model) a multiple of {GPT_HEAD_DIM}, "
                             f"or below it (one head), got {d}")
        self.checkpoint_every = checkpoint_every
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(context, d)
        for emb in (self.tok_emb, self.pos_emb):   # GPT-2's init: small embeddings, not N(0, 1)
            nn.init.normal_(emb.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(d, max(1, d // GPT_HEAD_DIM)) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        if tie_head:
            self.head.weight = self.tok_emb.weight

    def forward(self, idx: Tensor) -> Tensor:           # (B, T) token ids → (B, T, vocab) logits
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(positions)
        return self.head(self.ln_f(run_blocks(self.blocks, x, self.checkpoint_every)))


def token_stream(seed: int, vocab: int = GPT_VOCAB, length: int = 1 << 15) -> Tensor:
    """A synthetic 'text': a random walk where each token is the previous one plus a small
    jump (one of 4, drawn with fixed odds), mod vocab — structure a model can learn."""
    gen = torch.Generator().manual_seed(seed + 11)
    jumps = torch.tensor([1, 2, 7, 31])[torch.multinomial(torch.tensor([.5, .25, .15, .1]), length,
                                                          replacement=True, generator=gen)]
    return (torch.cumsum(jumps, 0) + int(torch.randint(vocab, (1,), generator=gen))) % vocab


def gpt_batch(cfg: RunConfig, stream: Tensor, context: int = GPT_CONTEXT) -> BatchFn:
    """`size` windows of the stream at random offsets: inputs (size, T), next tokens (size, T)."""
    window = torch.arange(context)

    def batch(step: int, micro_step: int, size: int) -> tuple[Tensor, Tensor]:
        gen = torch.Generator().manual_seed(_seed_of(cfg.seed, step, micro_step))
        starts = torch.randint(len(stream) - context - 1, (size, 1), generator=gen)
        return stream[starts + window], stream[starts + window + 1]

    return batch


def next_token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Cross-entropy of (B, T, vocab) logits against (B, T) next tokens, mean over tokens."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build_gpt(cfg: RunConfig, tie_head: bool = False) -> Workload:
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.layers, cfg.width, checkpoint_every=cfg.checkpoint_every, tie_head=tie_head)
    return Workload(model, gpt_batch(cfg, token_stream(cfg.seed)), next_token_loss, "gpt")


# --- cnn: conv + BatchNorm blocks on synthetic images ------------------------------------

CNN_IMAGE = 16        # pixels per side, 3 colour channels
CNN_CLASSES = 10


class ConvBlock(nn.Sequential):
    """3×3 convolution (no bias: BatchNorm's shift replaces it), BatchNorm, ReLU."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU()


class CNN(nn.Module):
    """A stem block (3 → width channels), `layers` blocks of width channels, global average
    pooling and a linear classifier. BatchNorm's running statistics are buffers: DDP
    broadcasts rank 0's before every forward."""

    def __init__(self, layers: int, width: int, checkpoint_every: int = 0):
        super().__init__()
        self.checkpoint_every = checkpoint_every
        self.stem = ConvBlock(3, width)
        self.blocks = nn.ModuleList(ConvBlock(width, width) for _ in range(layers))
        self.head = nn.Linear(width, CNN_CLASSES)

    def forward(self, x: Tensor) -> Tensor:            # (B, 3, H, W) → (B, classes)
        x = run_blocks(self.blocks, self.stem(x), self.checkpoint_every)
        return self.head(x.mean(dim=(2, 3)))


def cnn_batch(cfg: RunConfig) -> BatchFn:
    """Gaussian images and the class a fixed random linear teacher picks for each."""
    teacher = torch.randn(3 * CNN_IMAGE ** 2, CNN_CLASSES,
                          generator=torch.Generator().manual_seed(cfg.seed + 7))

    def batch(step: int, micro_step: int, size: int) -> tuple[Tensor, Tensor]:
        gen = torch.Generator().manual_seed(_seed_of(cfg.seed, step, micro_step))
        x = torch.randn(size, 3, CNN_IMAGE, CNN_IMAGE, generator=gen)
        return x, (x.flatten(1) @ teacher).argmax(1)

    return batch


def build_cnn(cfg: RunConfig) -> Workload:
    torch.manual_seed(cfg.seed)
    model = CNN(cfg.layers, cfg.width, checkpoint_every=cfg.checkpoint_every)
    return Workload(model, cnn_batch(cfg), F.cross_entropy, "cnn")


# --- the user's own: MODULE:FUNCTION ---------------------------------------------------------

def import_path() -> list[str]:
    """This process's module search path with the current folder first, as absolute paths:
    what ranks add to theirs so they import the user's module as the caller does (a
    console script's path has no current folder; a forkserver started elsewhere)."""
    return [os.getcwd(), *(os.path.abspath(p) for p in sys.path if p)]


def use_import_path(paths: list[str]) -> None:
    """Append the caller's search path entries this process lacks (rank side)."""
    sys.path.extend(p for p in paths if p not in sys.path)


def _factory(spec: str) -> Callable[[], Workload]:
    module_name, _, function = spec.partition(":")
    use_import_path([os.getcwd()])
    importlib.invalidate_caches()   # a module written since this process last listed its folder
    try:
        module = importlib.import_module(module_name)
    except Exception as err:   # ImportError, or whatever the module raises while importing
        where = ("a notebook cell's model is shipped by model_spec(function) in the kernel "
                 "that runs it: run that cell again" if module_name.startswith(CELL_PREFIX)
                 else "it must be importable from the current folder or PYTHONPATH")
        raise ValueError(f"model {spec!r}: cannot import module {module_name!r} "
                         f"({type(err).__name__}: {err}); {where}") from None
    factory = getattr(module, function, None)
    if not callable(factory):
        raise ValueError(f"model {spec!r}: module {module_name!r} has no function {function!r}")
    return factory


def _call_factory(spec: str, seed: int) -> Workload:
    factory = _factory(spec)
    torch.manual_seed(seed)                  # same initial weights on every rank
    try:
        workload = factory()
    except Exception as err:
        raise ValueError(f"model {spec!r}: calling it raised {type(err).__name__}: {err}") from None
    if not isinstance(workload, Workload):
        raise ValueError(f"model {spec!r} must return a dpviz.Workload(model=..., batch=..., "
                         f"loss=...), got {type(workload).__name__}")
    if not isinstance(workload.model, nn.Module) or not callable(workload.batch) \
            or not (workload.loss is None or callable(workload.loss)):
        raise ValueError(f"model {spec!r}: its Workload needs model=an nn.Module, batch=a "
                         f"function (step, micro_step, size) -> (inputs, targets), loss=None or "
                         f"a function (outputs, targets) -> scalar")
    return workload if workload.name != "custom" else dataclasses.replace(workload, name=spec)


# --- a factory defined in a notebook cell ---------------------------------------------------

CELL_PREFIX = "cell_"   # the modules `model_spec` writes: cell_<hash of their source>
CELL_FOLDER = "dpviz-models-"   # their folder in the temporary folder: dpviz-models-<pid>-<random>
_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"})
_MAX_CONSTANT = 10_000  # characters of a constant written into the shipped module


def model_spec(factory: Callable[[], Workload]) -> str:
    """The `RunConfig.model` string for `factory`: `module:function` if a module defines it,
    else `cell_<hash>:function`, its source shipped as a module (`cell_source`) written into
    this process's folder of cells, which goes on its module path and so on the ranks' (they
    add `import_path()` to theirs). Ranks are forked from a forkserver, not from this kernel:
    they can neither unpickle a notebook's function nor read its globals, so they import
    that module instead. A function that cannot travel is a ValueError before anything starts."""
    if _importable(factory):
        return f"{factory.__module__}:{factory.__qualname__}"
    source = cell_source(factory)
    name = CELL_PREFIX + hashlib.sha256(source.encode()).hexdigest()[:10]
    path = cell_folder() / f"{name}.py"
    if not path.exists():
        path.write_text(source)
    use_import_path([str(path.parent)])   # again each time: whoever restored sys.path dropped it
    return f"{name}:{factory.__name__}"


@functools.cache
def cell_folder() -> Path:
    """This process's folder of shipped cells (`model_spec` puts it on the module path),
    removed at exit; a kernel shut down without running its exit handlers leaves its own,
    which the next process to make one removes (`sweep_cell_folders`)."""
    sweep_cell_folders()
    folder = tempfile.mkdtemp(prefix=f"{CELL_FOLDER}{os.getpid()}-")
    atexit.register(shutil.rmtree, folder, True)
    return Path(folder)


def sweep_cell_folders() -> None:
    """Remove this user's cell folders whose process (the pid in their name) is gone."""
    for folder in Path(tempfile.gettempdir()).glob(f"{CELL_FOLDER}*-*"):
        pid = folder.name[len(CELL_FOLDER):].partition("-")[0]
        with contextlib.suppress(OSError):   # another process may remove it first
            if pid.isdigit() and folder.stat().st_uid == os.getuid() and not pid_alive(int(pid)):
                shutil.rmtree(folder)


def cell_source(fn: Callable) -> str:
    """A module that defines `fn` as its notebook cell did: the imports, plain constants,
    functions and classes of the notebook it uses (and they use), then `fn`'s own source.
    A name it needs that is none of these (a tensor, a model built in the notebook) is a
    ValueError naming it: the ranks get source text, never this kernel's objects."""
    shipment = _Shipment(fn)
    shipment.define(fn.__name__, fn)
    if shipment.refused:
        it = "it" if len(shipment.refused) == 1 else "them"
        raise ValueError(f"{fn.__name__} uses {', '.join(shipment.refused)} from this notebook, "
                         "which cannot travel to the ranks: they are other processes and receive "
                         "its source with its imports, plain constants (numbers, strings, tuples) "
                         "and the notebook's functions and classes it uses, never this kernel's "
                         f"objects. Create {it} inside {fn.__name__}, or import {it} from a module")
    parts = [f'"""{fn.__name__}, shipped from a notebook cell by dpviz (model_spec)."""',
             "\n".join(sorted(shipment.imports)), "\n".join(shipment.constants), *shipment.definitions]
    return "\n\n\n".join(part.strip() for part in parts if part) + "\n"


class _Shipment:
    """What a notebook function needs beside it on a rank, gathered name by name from its
    globals: import lines, constant lines, and definitions (each after those it uses)."""

    def __init__(self, fn: Callable):
        if not inspect.isfunction(fn):
            raise ValueError(f"pass the function itself, got {type(fn).__name__}")
        _require_top_level(fn)
        self.namespace, self.module = fn.__globals__, fn.__module__
        self.imports: list[str] = []
        self.constants: list[str] = []
        self.definitions: list[str] = []
        self.refused: list[str] = []
        self.seen: set[str] = set()

    def define(self, name: str, obj) -> None:
        """`obj`'s source after everything it uses (a class's bases exist before it)."""
        self.seen.add(name)
        source = _definition_source(obj)
        for needed in _global_names(source):
            self.need(needed)
        self.definitions.append(source if name == obj.__name__ else f"{source}\n{name} = {obj.__name__}")

    def need(self, name: str) -> None:
        """Ship what `name` is in the notebook; a builtin, a dunder, or a name the notebook
        lacks (it fails where it runs, as it would here) needs nothing."""
        if name in self.seen or name not in self.namespace or name.startswith("__"):
            return
        self.seen.add(name)
        value = self.namespace[name]
        if inspect.ismodule(value) and sys.modules.get(value.__name__) is value \
                and value.__name__ != "__main__":
            alias = f" as {name}" if name != value.__name__ else ""
            self.imports.append(f"import {value.__name__}{alias}")
        elif getattr(value, "__module__", None) == self.module and (inspect.isfunction(value)
                                                                    or inspect.isclass(value)):
            _require_top_level(value)
            self.define(name, value)
        elif _importable(value):
            self.imports.append(f"from {value.__module__} import {value.__qualname__}"
                                + (f" as {name}" if name != value.__qualname__ else ""))
        elif _is_constant(value):
            self.constants.append(f"{name} = {value!r}")
        else:
            self.refused.append(f"{name} (a {type(value).__name__})")


def _importable(obj) -> bool:
    """A function or class a module defines at its top level: it travels by name."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    qualname = getattr(obj, "__qualname__", "")
    return (module is not None and module.__name__ != "__main__" and qualname.isidentifier()
            and getattr(module, qualname, None) is obj)


def _is_constant(value) -> bool:
    """A value its own repr rebuilds (numbers, strings, None, tuples, lists, dicts of them)."""
    try:
        text = repr(value)
        return len(text) <= _MAX_CONSTANT and ast.literal_eval(text) == value
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _require_top_level(obj) -> None:
    """Only a `def` or `class` at a cell's top level has source that runs on its own."""
    if obj.__name__ == "<lambda>" or "<locals>" in obj.__qualname__:
        what = "a lambda" if obj.__name__ == "<lambda>" else obj.__qualname__
        raise ValueError(f"{what} cannot be shipped to the ranks: its source is what travels, so it "
                         "must be defined with `def` or `class` at the top level of a notebook cell")


def _definition_source(obj) -> str:
    """The source of a notebook function or class."""
    try:
        source = textwrap.dedent(inspect.getsource(obj)) if inspect.isfunction(obj) else _class_source(obj)
        if source is None:
            raise OSError("no cell of this kernel defines it")
    except (OSError, TypeError) as err:
        raise ValueError(f"cannot read the source of {obj.__qualname__} ({err}): define it with "
                         "`def` or `class` in a notebook cell, or in a module and import it") from None
    return source


def _class_source(cls: type) -> str | None:
    """A notebook class's statement. inspect looks for a class in its module's file, and a
    cell is none: it is found in the cell one of its methods was compiled from, else (its
    methods, if any, written by a decorator such as @dataclass) in the newest cell that
    defines it, the one whose class the notebook's name holds."""
    for member in vars(cls).values():
        func = getattr(member, "__func__", None) or getattr(member, "fget", None) or member
        found = (_class_in(func.__code__.co_filename, cls.__name__, func.__code__.co_firstlineno)
                 if inspect.isfunction(func) else None)
        if found:
            return found
    cells = [name for name in reversed(list(linecache.cache)) if not os.path.exists(name)]
    return next(filter(None, (_class_in(cell, cls.__name__) for cell in cells)), None)


def _class_in(filename: str, name: str, line: int | None = None) -> str | None:
    """The last top-level `class name` statement, decorators included, of a cell or file
    (around `line`, if given); None if it has none."""
    lines = linecache.getlines(filename)
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return None
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name
             and (line is None or node.lineno <= line <= node.end_lineno)]
    if not found:
        return None
    first = min([found[-1].lineno, *(d.lineno for d in found[-1].decorator_list)])
    return "".join(lines[first - 1:found[-1].end_lineno])


def _global_names(source: str) -> list[str]:
    """The names `source`'s code reads or sets in its module, in order of first use: what must
    exist beside it where it runs (decorators, defaults and base classes included)."""
    names: dict[str, None] = {}
    codes = [compile(source, "<shipped>", "exec")]
    for code in codes:   # grows as nested functions, classes and comprehensions are found
        names.update((ins.argval, None) for ins in dis.get_instructions(code) if ins.opname in _GLOBAL_OPS)
        codes += [const for const in code.co_consts if inspect.iscode(const)]
    return list(names)


def build_workload(cfg: RunConfig) -> Workload:
    """The workload `cfg.model` names, built with `cfg.seed` (same weights on every rank)."""
    if cfg.model == "mlp":
        return Workload(build_mlp(cfg), mlp_batch(cfg), loss_fn, "mlp")
    if cfg.model == "gpt":
        return build_gpt(cfg)
    if cfg.model == "cnn":
        return build_cnn(cfg)
    return _call_factory(cfg.model, cfg.seed)


def validate_model_spec(spec: str, size: int = 2, seed: int = 0) -> None:
    """Before any rank starts: import the user's factory, call it, check what it returns,
    and run one forward and loss on a tiny batch of `size` samples. Raises ValueError
    with one line that says what is wrong."""
    if spec in BUILTIN:
        return
    workload = _call_factory(spec, seed)
    try:
        first, again = workload.batch(0, 0, size), workload.batch(0, 0, size)
        x, y = first
    except Exception as err:
        raise ValueError(f"model {spec!r}: batch(0, 0, {size}) must return (inputs, targets); "
                         f"{type(err).__name__}: {err}") from None
    if not all(isinstance(t, Tensor) and t.dim() and t.shape[0] == size for t in (x, y)):
        raise ValueError(f"model {spec!r}: batch(0, 0, {size}) must return two tensors of "
                         f"{size} samples (dim 0), got {_shapes(first)}")
    if not all(torch.equal(a, b) for a, b in zip(first, again)):
        raise ValueError(f"model {spec!r}: batch(step, micro_step, size) returned different samples "
                         f"for the same arguments: it must be a pure function of them")
    try:
        loss = compute_loss(workload, workload.model(x), y)
    except Exception as err:
        raise ValueError(f"model {spec!r} rejects its own batch of shapes {_shapes(first)}: "
                         f"{type(err).__name__}: {str(err).splitlines()[0]}") from None
    if not (isinstance(loss, Tensor) and loss.numel() == 1):
        raise ValueError(f"model {spec!r}: loss must return a scalar tensor, got "
                         f"{_shapes((loss,)) if isinstance(loss, Tensor) else type(loss).__name__}")


def validate_run_config(cfg: RunConfig) -> RunConfig:
    """`config.validate(cfg)`, then try a user's model here (`validate_model_spec`): what a
    verb checks before its ranks start, so a bad model fails in this process, not on a rank."""
    from dpviz.core.config import validate

    cfg = validate(cfg)
    validate_model_spec(cfg.model, seed=cfg.seed)
    return cfg


def _shapes(tensors) -> str:
    return ", ".join(f"{tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
                     for t in tensors)


# --- using a workload ----------------------------------------------------------------------

def compute_loss(workload: Workload | None, outputs: Tensor, targets: Tensor) -> Tensor:
    """The workload's loss (None, or a workload without one: mean squared error)."""
    return (workload.loss if workload is not None and workload.loss else loss_fn)(outputs, targets)


def rank_batch(cfg: RunConfig, workload, step: int, micro_step: int, rank: int):
    """This rank's contiguous slice of the global batch, (inputs, targets); `workload` None
    is the MLP's data.

    `DistributedSampler` strides instead (rank r takes indices r, r + N, … of its order, padded
    to equal shards). With equal shards and a mean loss, the averaged gradient is the global
    batch's mean whatever the split, so the contiguous slice trains the same and is easier to
    read.
    """
    batch = mlp_batch(cfg) if workload is None else workload.batch
    x, y = batch(step, micro_step, cfg.world_size * cfg.batch_per_rank)
    lo, hi = rank * cfg.batch_per_rank, (rank + 1) * cfg.batch_per_rank
    return x[lo:hi], y[lo:hi]


def has_batchnorm(model: nn.Module) -> bool:
    """BatchNorm normalises by its batch's statistics: a rank's slice, not the global batch."""
    from dpviz.engine.torch_gate import batch_norm_classes

    return any(isinstance(m, batch_norm_classes()) for m in model.modules())


def single_process_params(cfg: RunConfig, per_slice: bool | None = None) -> list[Tensor]:
    """Train one process on the concatenated batches; flat parameters after each step.

    Same model, same optimizer, loss scaled by 1/accum_steps: the large-batch SGD that DDP
    with accumulation must equal (a run with `scale_loss=False` is compared against it too).
    A model with BatchNorm runs each rank's slice through the model separately (its
    statistics are per rank under DDP) and averages their losses: that, not the whole
    batch at once, is what DDP computes (`reference_kind`). `per_slice` forces either way
    (False on a BatchNorm model shows how far the whole-batch statistics lead elsewhere).
    """
    workload = build_workload(cfg)
    model = workload.model
    per_slice = has_batchnorm(model) if per_slice is None else per_slice
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    after = []
    for step in range(cfg.steps):
        for micro in range(cfg.accum_steps):
            x, y = workload.batch(step, micro, cfg.world_size * cfg.batch_per_rank)
            slices = zip(x.split(cfg.batch_per_rank), y.split(cfg.batch_per_rank)) if per_slice \
                else [(x, y)]
            parts = cfg.accum_steps * (cfg.world_size if per_slice else 1)
            for xs, ys in slices:
                (compute_loss(workload, model(xs), ys) / parts).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        after.append(flat_params(model))
    return after


def whole_batch_gap(cfg: RunConfig) -> float:
    """max |Δθ| after `cfg.steps` between one process on the whole batch at once and one
    running each rank's slice separately: 0 up to rounding without BatchNorm; with it, the
    difference between global and per-rank batch statistics."""
    whole, sliced = single_process_params(cfg, per_slice=False), single_process_params(cfg, per_slice=True)
    return float((whole[-1] - sliced[-1]).abs().max())


def reference_kind(model: nn.Module) -> str:
    """What the single-process reference computes, in words (records and notebooks print it)."""
    return ("each rank's slice through the model separately, losses averaged (BatchNorm "
            "statistics are per rank)" if has_batchnorm(model) else "the concatenated batch at once")


def addition_chain(cfg: RunConfig, workload: Workload) -> int:
    """How many float32 additions stand behind one gradient entry of this workload (the `n`
    of `dpviz.core.rounding`): the MLP's own count, else `network_sums` over its layers."""
    if workload.name == "mlp":
        return mlp_sums(cfg)
    fans = [w.shape[0] * (w[0].numel() // max(1, w.shape[1])) + w[0].numel()   # fan-out + fan-in
            for w in workload.model.parameters() if w.dim() >= 2]
    fans += [w.numel() for w in workload.model.parameters() if w.dim() == 1]  # a norm's mean; biases too (looser)
    x, _ = workload.batch(0, 0, 1)
    # positions per sample: tokens of an id sequence (B, T), pixels of an image (B, C, H, W)
    positions = x[0].numel() if not x.is_floating_point() else x[0, 0].numel() if x.dim() > 2 else 1
    return network_sums(fans, positions, cfg.world_size * cfg.batch_per_rank * cfg.accum_steps)


def flat_params(model: nn.Module) -> Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def describe_workload(model: nn.Module, name: str) -> WorkloadInfo:
    """The record of a workload: its name, and each parameter's name, shape and bytes
    (in `model.parameters()` order, the order DDP's logging indexes)."""
    return WorkloadInfo(
        name=name,
        params=describe_params((n, tuple(p.shape), p.numel() * p.element_size())
                               for n, p in model.named_parameters()),
        buffers=describe_params((n, tuple(b.shape), b.numel() * b.element_size())
                                for n, b in model.named_buffers()))


def reference_sgd_bound(cfg: RunConfig) -> float:
    """`sgd_bound` for `cfg`'s MLP workload, scaled by the largest parameter one process holds
    on the way (its initial weights and every step's)."""
    return sgd_bound(cfg, max_abs([flat_params(build_mlp(cfg)), *single_process_params(cfg)]))


def reference_gradient_max(cfg: RunConfig) -> float:
    """Largest gradient entry of one process on `cfg`'s first whole batch (the scale of a
    gradient comparison)."""
    model = build_mlp(cfg)
    x, y = global_batch(cfg, 0, 0)
    loss_fn(model(x), y).backward()
    return max_abs(p.grad for p in model.parameters())

"""Workloads: the built-in GPT and CNN and a user's own model (from a module, or a notebook
cell's function shipped as source) train live under DDP, their records label real layers, and
a bad factory is refused before any rank starts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dpviz import RunConfig, load, run
from dpviz.lessons.buckets.records import logged_layout, modelled_layout, step_buckets

ROOT = Path(__file__).resolve().parents[1]

# A user's module as someone would write it next to their notebook: no dpviz internals.
USER_MODULE = '''
import torch
from torch import nn
import dpviz

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 48), nn.Tanh(), nn.Linear(48, 48), nn.Tanh())
        self.out = nn.Linear(48, 3)

    def forward(self, x):
        return self.out(self.body(x))

def batch(step, micro_step, size):
    g = torch.Generator().manual_seed(1000 * step + micro_step)
    x = torch.randn(size, 12, generator=g)
    return x, (x[:, :3] * 2).argmax(1)

def build():
    return dpviz.Workload(model=Net(), batch=batch, loss=nn.functional.cross_entropy)
'''

BAD_MODULES = {   # module text, function, words the one-line error must contain
    "unimportable": ("import not_a_real_package_xyz\n", "build", "cannot import module"),
    "missing": ("def other():\n    pass\n", "build", "has no function 'build'"),
    "wrong_type": ("from torch import nn\ndef build():\n    return nn.Linear(3, 1)\n", "build",
                   "must return a dpviz.Workload"),
    "bad_shapes": ("import torch, dpviz\nfrom torch import nn\n"
                   "def build():\n    return dpviz.Workload(nn.Linear(3, 1), "
                   "lambda s, m, n: (torch.ones(n, 5), torch.ones(n, 1)))\n", "build",
                   "rejects its own batch of shapes (2, 5), (2, 1)"),
}


def _env() -> dict:
    """This worktree first on the path, as the developers' rules ask."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _dpviz_command() -> list[str]:
    """The console script a user types (its path holds no current folder, unlike `-m`)."""
    script = Path(sys.executable).parent / "dpviz"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dpviz"]


def test_a_users_factory_in_the_current_folder_trains_under_ddp(tmp_path):
    (tmp_path / "mymod.py").write_text(USER_MODULE)
    out = subprocess.run([*_dpviz_command(), "run", "--model", "mymod:build", "--ranks", "2",
                          "--steps", "3", "--out", "rec"], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    record = load(tmp_path / "rec" / "record.json")
    assert record.config["model"] == "mymod:build"
    assert record.workload.name == "mymod:build"
    assert record.workload.param_names() == ("body.0.weight", "body.0.bias", "body.2.weight",
                                             "body.2.bias", "out.weight", "out.bias")
    assert [p.shape for p in record.workload.params][:2] == [(48, 12), (48,)]
    assert {p for b in record.buckets for p in b.params} == set(record.workload.param_names())
    for check in record.checks:
        assert check.max_diff_across_ranks == 0.0     # every rank receives the same all-reduce
        assert check.max_diff_vs_single_process <= check.rounding_bound


def test_bad_factories_are_refused_before_any_rank_starts(tmp_path):
    """Each bad factory: exit 2 with one `dpviz run: error:` line, and the forkserver that
    forks ranks never started (so no rank did)."""
    for name, (text, _, _) in BAD_MODULES.items():
        (tmp_path / f"{name}.py").write_text(text)
    probe = textwrap.dedent("""
        import json, sys
        import multiprocessing.forkserver as fs
        from dpviz.app.cli import main
        codes = {}
        for spec in sys.argv[1:]:
            try:
                codes[spec] = main(["run", "--model", spec, "--out", "out"])
            except SystemExit as stop:
                codes[spec] = stop.code
        print(json.dumps({"codes": codes, "forkserver": fs._forkserver._forkserver_pid}))
    """)
    specs = [f"{name}:{fn}" for name, (_, fn, _) in BAD_MODULES.items()]
    out = subprocess.run([sys.executable, "-c", probe, *specs], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["codes"] == {spec: 2 for spec in specs}
    assert result["forkserver"] is None, "a rank process was started for a bad model"
    errors = [line for line in out.stderr.splitlines() if line.startswith("dpviz run: error:")]
    assert len(errors) == len(specs), out.stderr
    for (name, (_, _, words)), line in zip(BAD_MODULES.items(), errors):
        assert words in line, (name, line)
    assert not (tmp_path / "out" / "record.json").exists()


def test_gpt_run_from_the_command_line_writes_real_buckets_spans_and_checks(tmp_path, capsys):
    """`dpviz run --model gpt`, through the command line's `main` in this process (the console
    script as a process of its own: test_a_users_factory_in_the_current_folder_trains_under_ddp)."""
    from dpviz.app.cli import main

    code = main(["run", "--model", "gpt", "--ranks", "2", "--steps", "3", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err[-2000:]
    record = load(tmp_path / "record.json")
    names = record.workload.param_names()
    assert names[:2] == ("tok_emb.weight", "pos_emb.weight")
    assert {"blocks.3.attn.qkv.weight", "blocks.3.mlp.fc.weight", "blocks.3.ln1.weight",
            "ln_f.weight", "head.weight"} <= set(names)
    _assert_buckets_are_ddps(record)
    for rank in range(2):      # every bucket of every step was all-reduced, on every rank
        reduces = record.spans_of(rank=rank, kind="allreduce")
        assert len(reduces) >= len([b for b in record.buckets if b.rank == rank])
    for check in record.checks:
        assert check.max_diff_across_ranks == 0.0
        assert check.max_diff_vs_single_process <= check.rounding_bound


def _assert_buckets_are_ddps(record) -> None:
    """The buckets the comm hook saw after the rebuild hold exactly the parameters DDP's own
    logging lists for them (by index into the recorded parameter list), and our model of
    the packing predicts the same layout."""
    logged = logged_layout(record)
    names = record.workload.param_names()
    seen = [set(b.params) for b in step_buckets(record, step=record.steps[-1])]
    assert seen == [{names[i] for i in bucket} for bucket in logged.rebuilt_params]
    assert modelled_layout(record) == [list(b) for b in logged.rebuilt_params]
    assert [b.bytes for b in step_buckets(record, step=record.steps[-1])] == list(logged.rebuilt_sizes)


@pytest.mark.parametrize("factory", [None, "workload_factories:tied_gpt"])
def test_gpt_buckets_under_ddps_default_cap_match_its_logging(cluster2, factory):
    """DDP's default: a 1 MiB first bucket, then 25 MiB. Untied, the head's gradient is ready
    first; tied, head and token embedding are one parameter, ready last."""
    cfg = RunConfig(model=factory or "gpt", bucket_cap_mb=None)
    record = run(cfg, cluster=cluster2)
    _assert_buckets_are_ddps(record)
    first = step_buckets(record, step=2)[0]
    names = record.workload.param_names()
    _assert_gradient_figure_and_text(record)
    if factory is None:
        assert len(step_buckets(record, step=2)) >= 2 and first.bytes >= 1 << 20
        assert first.params[0] == "head.weight"
    else:
        assert "head.weight" not in names     # shared: DDP sees tok_emb.weight once
        # its gradient (head's + embedding's) is complete only at the very end of backward
        assert step_buckets(record, step=2)[-1].params[-1] == "tok_emb.weight"


def _assert_gradient_figure_and_text(record) -> None:
    """The gradient-size figure names real layers without overlapping labels; the text names
    the largest gradient and one line per rebuilt bucket."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpviz.lessons.buckets.records import describe_gradients, gradients
    from dpviz.lessons.buckets.plots import plot_gradient_sizes
    from dpviz.plots.legibility import overlapping_texts

    grads = gradients(record)
    assert sorted(g.name for g in grads) == sorted(record.workload.param_names())
    fig = plot_gradient_sizes(record).figure
    try:
        assert overlapping_texts(fig) == []
        assert max(grads, key=lambda g: g.bytes).name in {t.get_text() for t in fig.axes[0].texts}
    finally:
        plt.close(fig)
    text = describe_gradients(record)
    assert f"largest {max(grads, key=lambda g: g.bytes).name}" in text
    assert text.count("  bucket ") == len(logged_layout(record).rebuilt_params)


@pytest.mark.numeric
@pytest.mark.parametrize("model", ["mlp", "gpt", "cnn"])
def test_ddp_equals_one_process_for_every_builtin(cluster2, model):
    """DDP = one process on the concatenated batch (per slice for BatchNorm), within the
    rounding bound of `dpviz.core.rounding`, with and without accumulation."""
    for accum in (1, 2):
        record = run(RunConfig(model=model, accum_steps=accum), cluster=cluster2)
        assert record.workload.name == model
        for check in record.checks:
            assert check.max_diff_across_ranks == 0.0
            assert check.max_diff_vs_single_process <= check.rounding_bound, (model, accum, check)
        per_slice = model == "cnn"
        assert ("separately" in record.checks[0].reference) == per_slice


@pytest.mark.numeric
def test_batchnorm_makes_ddp_differ_from_the_whole_batch_by_more_than_rounding(cluster2):
    """Each rank normalises by its own slice's statistics: the whole batch at once is NOT
    what DDP computes, and the gap is far above rounding (the CNN lesson of notebook 15)."""
    from dpviz.engine.workloads import whole_batch_gap

    cfg = RunConfig(model="cnn")
    record = run(cfg, cluster=cluster2)
    assert whole_batch_gap(cfg) > record.checks[-1].rounding_bound   # ~10× here: statistics, not rounding
    assert record.workload.buffers and any(b.name.endswith("running_mean") for b in record.workload.buffers)


def test_model_names_are_checked_without_importing(tmp_path):
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        RunConfig(model="gpt2").replace()
    cfg = RunConfig(model="some.module:factory")   # a record may name a model this machine lacks
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert RunConfig(model="gpt").width == 64 and RunConfig().replace(model="gpt").width == 64


@pytest.mark.numeric
@pytest.mark.parametrize("model", ["gpt", "cnn"])
def test_accumulated_gradient_is_the_large_batch_one_for_gpt_and_cnn(cluster2, model):
    """K = 3 micro-steps under no_sync (the run loop's own code) give the gradient of one
    process on all K × world samples (per slice for BatchNorm), within the rounding bound of
    the workload's own chain of additions."""
    from dpviz.lessons.accumulation.live import check_gradients
    from dpviz.core.rounding import sum_order_bound
    from dpviz.engine.workloads import addition_chain, build_workload

    cfg = RunConfig(model=model, accum_steps=3)
    check = check_gradients(cfg, cluster=cluster2)
    assert check.all_reduces_per_micro[:2] == (0, 0) and check.all_reduces_per_micro[2] >= 1
    assert check.max_diff_across_ranks == 0.0
    assert check.max_diff_vs_large_batch <= sum_order_bound(addition_chain(cfg, build_workload(cfg)),
                                                            check.reference_max_abs)


@pytest.mark.parametrize("model", ["gpt", "cnn"])
def test_checkpointed_blocks_recompute_in_backward_and_train_the_same(cluster2, model):
    """checkpoint_every=2: segments of two blocks recompute their forward inside backward
    (found in the trace), and the parameters still equal one process's."""
    record = run(RunConfig(model=model, checkpoint_every=2), cluster=cluster2)
    assert record.spans_of(rank=0, kind="recompute", step=1)
    for check in record.checks:
        assert check.max_diff_vs_single_process <= check.rounding_bound


def test_a_users_model_from_a_folder_added_after_the_ranks_started(cluster2, tmp_path, monkeypatch):
    """The warm ranks were forked before this folder was on the path: they import the user's
    module from the caller's path that the verbs hand them (here the accumulation check)."""
    from dpviz.lessons.accumulation.live import check_gradients

    (tmp_path / "late_model.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    check = check_gradients(RunConfig(model="late_model:build", accum_steps=2), cluster=cluster2)
    assert check.all_reduces_per_micro == (0, 1) and check.max_diff_across_ranks == 0.0


# --- a factory defined in a notebook cell ------------------------------------------------------

def notebook():
    """The IPython shell a notebook's kernel runs, with USER_MODULE's text run as one cell."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    result = shell.run_cell(USER_MODULE)
    assert result.success, result.error_in_exec
    return shell


def trained_on_ranks(ctx, cfg: RunConfig, search_path: list[str]) -> dict:
    """Rank task: `cfg.steps` plain DDP steps of `cfg.model` with SGD; each step's all-reduced
    gradient and the parameters after the last, as floats."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpviz.engine.workloads import build_workload, compute_loss, flat_params, rank_batch, use_import_path

    use_import_path(search_path)
    workload = build_workload(cfg)
    ddp = DDP(workload.model)
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
    grads = []
    for step in range(cfg.steps):
        x, y = rank_batch(cfg, workload, step, 0, ctx.rank)
        compute_loss(workload, ddp(x), y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in ddp.module.parameters()]).tolist())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return {"grads": grads, "params": flat_params(ddp.module).tolist()}


def test_a_factory_defined_in_a_notebook_cell_trains_as_the_same_module_does(cluster2, tmp_path, monkeypatch):
    """The cell's `build`, shipped as source (`model_spec`), trains on 2 live ranks to the
    gradients and parameters of the same text imported as a module, bit for bit: exact by
    construction (the same source runs the same float operations in the same order on the
    same ranks). A run's record keeps the readable spec and the module's losses."""
    from dpviz.engine.workloads import CELL_PREFIX, import_path, model_spec

    (tmp_path / "same_model.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = model_spec(notebook().user_ns["build"])
    assert spec.startswith(CELL_PREFIX) and spec.endswith(":build")
    shipped, module = (cluster2.run_task(trained_on_ranks, RunConfig(model=model, steps=3), import_path())
                       for model in (spec, "same_model:build"))
    assert shipped == module
    assert shipped[0] == shipped[1]     # every rank applies the same all-reduced gradient
    record = run(RunConfig(model=spec, steps=2), cluster=cluster2)
    assert json.loads(json.dumps(record.config))["model"] == spec and record.workload.name == spec
    assert record.losses == run(RunConfig(model="same_model:build", steps=2), cluster=cluster2).losses


def test_a_cell_factory_ships_its_imports_constants_and_notebook_definitions_only():
    """What travels: the notebook's imports, constants, functions and classes the factory uses
    (a dataclass too, whose methods say nothing of its cell), each before what uses it."""
    from dpviz.engine.workloads import cell_source, model_spec, validate_model_spec

    shell = notebook()
    assert shell.run_cell("from dataclasses import dataclass\nWIDTH = 48\nunused = torch.ones(1)\n"
                          "@dataclass\nclass Named:\n    prefix: str = 'net'\n"
                          "def build_named():\n    name = f'{Named().prefix}{WIDTH}'\n    return "
                          "dpviz.Workload(Net(), batch, nn.functional.cross_entropy, name)\n").success
    factory = shell.user_ns["build_named"]
    lines = cell_source(factory).splitlines()
    assert lines[3:7] == ["from dataclasses import dataclass", "import dpviz", "import torch",
                          "import torch.nn as nn"]
    assert "WIDTH = 48" in lines and not any("unused" in line for line in lines)
    order = [lines.index(line) for line in ("@dataclass", "class Named:", "class Net(nn.Module):",
                                            "def batch(step, micro_step, size):", "def build_named():")]
    assert order == sorted(order) and order[0] + 1 == order[1]
    assert model_spec(factory) == model_spec(factory)    # the same source is the same module
    validate_model_spec(model_spec(factory))            # it imports and runs on its own


@pytest.mark.parametrize("cell, name, says", [
    ("table = torch.randn(64, 12)\ndef from_table():\n    return dpviz.Workload(Net(), "
     "lambda s, m, n: (table[:n], table[:n, :3].argmax(1)), nn.functional.cross_entropy)\n",
     "from_table", r"^from_table uses table \(a Tensor\) from this notebook, which cannot travel"),
    ("net = Net()\ndef reuses_net():\n    return dpviz.Workload(net, batch)\n",
     "reuses_net", r"^reuses_net uses net \(a Net\) from this notebook"),
    ("quick = lambda: dpviz.Workload(Net(), batch)\n", "quick", "^a lambda cannot be shipped"),
    ("def outer():\n    def inner():\n        return dpviz.Workload(Net(), batch)\n    return inner\n"
     "nested = outer()\n", "nested", r"^outer\.<locals>\.inner cannot be shipped"),
])
def test_a_cell_factory_that_cannot_travel_is_refused_before_any_rank_starts(monkeypatch, cell, name, says):
    from dpviz.engine import launch
    from dpviz.engine.workloads import model_spec

    started = []
    monkeypatch.setattr(launch._Ranks, "__init__", lambda self, *args: started.append(args))
    shell = notebook()
    assert shell.run_cell(cell).success
    with pytest.raises(ValueError, match=says):
        run(RunConfig(model=model_spec(shell.user_ns[name])))
    assert started == []


def test_cell_folders_whose_process_is_gone_are_swept(tmp_path, monkeypatch):
    """A kernel shut down without its exit handlers leaves its folder of shipped cells: the
    next process to make one removes it, never a live process's."""
    from dpviz.engine import workloads

    monkeypatch.setattr(workloads.tempfile, "gettempdir", lambda: str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    for pid in (gone, os.getpid()):
        (tmp_path / f"{workloads.CELL_FOLDER}{pid}-abc").mkdir()
    workloads.sweep_cell_folders()
    assert [p.name for p in tmp_path.iterdir()] == [f"{workloads.CELL_FOLDER}{os.getpid()}-abc"]

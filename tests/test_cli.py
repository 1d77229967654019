"""The command line: help lists the subcommands; bad input is one line, exit 2, nothing spawned."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpviz.app.cli import main
from dpviz.core.discover import command_modules


def _cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m dpviz ARGS` as a user runs it: a process of its own."""
    return subprocess.run([sys.executable, "-m", "dpviz", *args], capture_output=True, text=True,
                          timeout=600)


def _main(capsys, *args: str) -> str:
    """`dpviz ARGS` in this process, what it printed; it must exit 0. The same `main` as
    `_cli`'s (test_run_writes_record_traces_and_prints_a_summary runs it end to end), without
    a new interpreter importing torch and its own forkserver for every call."""
    code = main(list(args))
    printed = capsys.readouterr()
    assert code == 0, printed.err
    return printed.out


def test_help_lists_subcommands_and_console_script_agrees():
    out = _cli("--help")
    assert out.returncode == 0
    for command in ("run", "animate"):
        assert command in out.stdout
    script = subprocess.run([str(Path(sys.executable).parent / "dpviz"), "--help"], capture_output=True, text=True)
    assert script.returncode == 0 and script.stdout == out.stdout


def test_each_command_is_listed_with_the_name_and_help_its_module_defines():
    """`dpviz --help` reads names and helps from the source; importing the modules agrees."""
    import importlib

    listed = command_modules()
    assert {"run", "animate", "load-trace", "report"} <= set(listed)
    for name, (module_name, help_) in listed.items():
        module = importlib.import_module(f"dpviz.{module_name}")
        assert (module.NAME, module.HELP) == (name, help_)
        assert callable(module.add_arguments) and callable(module.main)


def test_a_command_imports_its_own_module_only():
    """`dpviz load-trace` pays for no other command's imports, and for no plotting before it draws."""
    probe = ("import sys; from dpviz.app.cli import build_parser; "
             "build_parser(['load-trace', 'x']).parse_args(['load-trace', 'x']); "
             "print(' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    others = {f"dpviz.{m}" for n, (m, _) in command_modules().items() if n != "load-trace"}
    assert "dpviz.app.commands.load_trace" in loaded and not loaded & others
    assert not {m for m in loaded if m.startswith(("matplotlib", "torch"))}


def test_a_failing_rank_is_told_apart_from_a_bug():
    """A RankError exits 1 with its message; any other RuntimeError keeps its traceback."""
    from dpviz.app.cli import _rank_failed
    from dpviz.engine.launch import RankError, RankTimeout

    assert _rank_failed(RankError(0, "died")) and _rank_failed(RankTimeout([1], 5.0, "a task"))
    assert not _rank_failed(RuntimeError("a bug"))


@pytest.mark.parametrize("args, message", [
    (["run", "--ranks", "0", "--out", "x"], "--ranks: must be >= 1"),
    (["run", "--ranks", "two", "--out", "x"], "expected a whole number"),
    (["run", "--ranks", "64", "--out", "x"], "at most"),
    (["run", "--steps", "0", "--out", "x"], "--steps"),
    (["run", "--bucket-cap-mb", "0", "--out", "x"], "must be > 0"),
    (["run", "--backend", "nccl", "--out", "x"], "one GPU per rank"),
    (["run", "--out", "/proc/forbidden/x"], "cannot create output folder"),
    (["animate", "ring", "--record", "/nonexistent.json", "--out", "a.mp4"], "no such file"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_run_writes_record_traces_and_prints_a_summary(tmp_path):
    out = _cli("run", "--ranks", "2", "--steps", "2", "--bucket-cap-mb", "0.25", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "overlap fraction" in out.stdout and "step time" in out.stdout
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["kind"] == "ddp_run" and record["world_size"] == 2
    assert {p.name for p in tmp_path.iterdir()} >= {"record.json", "trace-rank0.json",
                                                      "trace-rank1.json", "trace-merged.json"}


def test_a_first_link_run_names_the_link_and_has_buckets_to_overlap(tmp_path, capsys):
    """`dpviz run --link classroom` with every other option left alone: the printed
    communication names the link's time (it is in the total), and the default model splits
    into several buckets, the first handed to the link while backward still runs."""
    from dpviz.analysis.overlap import steady_steps, summarize
    from dpviz.core.record import load

    printed = _main(capsys, "run", "--ranks", "2", "--steps", "3", "--link", "classroom", "--out", str(tmp_path))
    record = load(tmp_path / "record.json")
    rows = summarize(record, steady_steps(record))
    link_ms = sum(r.link_ms for r in rows) / len(rows)
    n_links = sum(r.n_links for r in rows) / len(rows)
    line = next(line for line in printed.splitlines() if line.startswith("communication"))
    assert f"emulated link {n_links:.3g}× {link_ms:.2f} ms" in line, line   # as printed: 2 decimals
    for step in steady_steps(record):
        mine = record.spans_of(rank=0, step=step)
        hooks = sorted(s.start_us for s in mine if s.kind == "bucket_hook")
        assert len(hooks) >= 2, f"step {step}: {len(hooks)} bucket(s)"
        assert hooks[0] < max(s.end_us for s in mine if s.kind == "backward")


def test_run_accumulates_and_its_record_animates(tmp_path, capsys):
    """`--accum-steps 3`: no_sync on the first two micro-steps, so only the third all-reduces
    (one bucket in iteration 0, then the 0.25 MB cap's four); both scenes build from the record."""
    _main(capsys, "run", "--ranks", "2", "--steps", "2", "--accum-steps", "3", "--bucket-cap-mb", "0.25",
          "--out", str(tmp_path))
    record = json.loads((tmp_path / "record.json").read_text())
    assert [m["all_reduces"] for m in record["micro_steps"]] == [0, 0, 1, 0, 0, 4]
    for scene in ("buckets", "accumulation"):
        printed = _main(capsys, "animate", scene, "--record", str(tmp_path / "record.json"),
                        "--out", str(tmp_path / f"{scene}.mp4"), "--dry-run")
        assert "scene builds" in printed


def test_checkpointing_writes_its_record_and_the_scene_builds_from_it(tmp_path, capsys):
    _main(capsys, "checkpointing", "--layers", "8", "--width", "64", "--batch", "64",
          "--checkpoint-every", "0,2,4", "--out", str(tmp_path))
    record = json.loads((tmp_path / "checkpointing.json").read_text())
    peaks = {row["checkpoint_every"]: row["peak_activation_bytes"] for row in record["rows"]}
    assert list(peaks) == [0, 2, 4] and peaks[2] < peaks[0]   # checkpointing keeps fewer activations
    printed = _main(capsys, "animate", "checkpointing", "--record", str(tmp_path / "checkpointing.json"),
                    "--out", str(tmp_path / "checkpointing.mp4"), "--dry-run")
    assert "scene builds" in printed

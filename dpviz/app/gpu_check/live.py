"""The GPU check's runs: each check drives dpviz as a user would (the CLI's `run`, `load-trace`
and `report`, the checkpointing measurement, the cap slider) on CUDA where torch sees a GPU,
else the same calls on CPU, and turns what they recorded into rows (`records`).

With CUDA: NCCL with one rank per GPU (world size 1 on one GPU), and 2 gloo ranks on CUDA
tensors sharing GPU 0; the activation peak from the CUDA allocator (`max_memory_allocated`);
the cap slider's moves on the NCCL ranks. Without: gloo on CPU for all of it. Every check runs
even when one before it failed; a check that raises is a failed row with its error.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import statistics
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from dpviz.app.gpu_check.records import CheckRow, GpuCheck, anatomy_row, checkpointing_row, run_rows

# The trained MLP: on a GPU big enough that backward kernels overlap the all-reduces of
# several 4 MiB buckets (8 blocks of 1024², 32 MiB of gradients); on CPU the notebooks' demo.
GPU_RUN = dict(layers=8, width=1024, batch=128, bucket_cap_mb=4.0, steps=3)
CPU_RUN = dict(layers=4, width=256, batch=32, bucket_cap_mb=25.0, steps=3)
CHECKPOINT_KS = (0, 2, 4, 8)
SLIDER_MOVES = 4


def environment() -> dict:
    """What the machine is: torch, CUDA, NCCL, GPUs, CPUs, load."""
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = None
    if gpus and dist.is_nccl_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return dict(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda,
                nccl=nccl, gpu_count=gpus,
                gpu_names=[torch.cuda.get_device_name(i) for i in range(gpus)],
                tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
                cpus=os.cpu_count(), load=", ".join(f"{x:.1f}" for x in os.getloadavg()))


def _timed(name: str, check) -> list[CheckRow]:
    """Run one check (a function returning rows); an exception becomes a failed row."""
    t0 = time.perf_counter()
    try:
        rows = check()
    except Exception as err:   # noqa: BLE001: a check that breaks is a finding, not a crash
        tail = traceback.format_exc().strip().splitlines()[-3:]
        rows = [CheckRow(name, False, note=f"{type(err).__name__}: {err} | {' / '.join(tail)}"[:600])]
    seconds = round(time.perf_counter() - t0, 2)   # the whole check's, on its first row
    return [CheckRow(r.name, r.passed, r.figures, r.note, seconds if i == 0 else 0.0)
            for i, r in enumerate(rows)]


def _cli(*argv: str) -> str:
    """`dpviz ARGV...` in this process; returns what it printed (an error if it failed)."""
    from dpviz.app.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    if code:
        raise RuntimeError(f"dpviz {' '.join(argv)} exited {code}: {out.getvalue()[-400:]}")
    return out.getvalue()


def run_check(label: str, out: Path, backend: str, device: str, ranks: int, size: dict) -> list[CheckRow]:
    """`dpviz run` with this backend and device; its record judged (`records.run_rows`)."""
    from dpviz.core.record import RunRecord, load

    _cli("run", "--backend", backend, "--device", device, "--ranks", str(ranks),
         "--layers", str(size["layers"]), "--width", str(size["width"]), "--batch", str(size["batch"]),
         "--steps", str(size["steps"]), "--bucket-cap-mb", str(size["bucket_cap_mb"]), "--out", str(out))
    record = load(out / "record.json", expect=RunRecord)
    gpu = device == "cuda"
    return run_rows(label, record, gpu) + [anatomy_row(label, record, gpu)]


def trace_tools_check(run_dir: Path, out: Path) -> list[CheckRow]:
    """`dpviz load-trace` and `dpviz report` on the per-rank traces a run just wrote."""
    from dpviz.core.record import RunRecord, load

    traces = sorted(str(p) for p in run_dir.glob("trace-rank*.json"))
    _cli("load-trace", *traces, "--out", str(out / "load-trace"))
    loaded = load(out / "load-trace" / "record.json", expect=RunRecord)
    ranks = len({s.rank for s in loaded.spans})
    rows = [CheckRow("load-trace", ranks == len(traces) and bool(loaded.spans),
                     dict(traces=len(traces), ranks=ranks, spans=len(loaded.spans)))]
    report = out / "report.html"
    _cli("report", *traces, "--out", str(report))
    size = report.stat().st_size
    return rows + [CheckRow("report", size > 0, dict(html_kb=round(size / 1024)))]


def cuda_peaks(ctx, cfg, ks: list[int]) -> dict[int, int] | None:
    """Rank task: per k, the CUDA allocator's peak over one forward+backward, above what was
    allocated before it (the batch is copied to the GPU inside, as the CPU measurement counts
    it). A warm-up step first, so gradients and cuBLAS's workspace exist before."""
    import torch

    from dpviz.engine.workloads import build_workload, compute_loss

    if ctx.rank != 0:
        return None
    device = torch.device(ctx.device)
    peaks = {}
    for k in ks:
        workload = build_workload(cfg.replace(checkpoint_every=k))
        model = workload.model.to(device)
        x_src, y_src = workload.batch(0, 0, cfg.batch_per_rank)
        compute_loss(workload, model(x_src.to(device)), y_src.to(device)).backward()
        for p in model.parameters():
            p.grad.zero_()
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        x, y = x_src.to(device), y_src.to(device)
        compute_loss(workload, model(x), y).backward()
        del x, y
        torch.cuda.synchronize(device)
        peaks[k] = torch.cuda.max_memory_allocated(device) - base
        del model, workload
        torch.cuda.empty_cache()
    return peaks


def checkpointing_check(gpu: bool) -> list[CheckRow]:
    """The √n model against the allocator: CPU's (profiler memory events) always, CUDA's
    (`max_memory_allocated`, on GPU 0) where there is one."""
    from dpviz.lessons.checkpointing.live import DEMO_CONFIG, measure_checkpointing
    from dpviz.engine.launch import Cluster

    record = measure_checkpointing(DEMO_CONFIG, checkpoint_every=CHECKPOINT_KS)
    predicted = {r.checkpoint_every: r.prediction.peak_bytes for r in record.rows}
    rows = [checkpointing_row(predicted, {r.checkpoint_every: r.peak_activation_bytes for r in record.rows},
                              "CPU allocator, profiler")]
    if gpu:
        cfg = DEMO_CONFIG.replace(backend="nccl")
        with Cluster(1, "nccl") as one:
            peaks = one.run_task(cuda_peaks, cfg, list(CHECKPOINT_KS))[0]
        rows.append(checkpointing_row(predicted, {int(k): v for k, v in peaks.items()},
                                      "CUDA allocator, max_memory_allocated"))
    return rows


def slider_check(backend: str, device: str, ranks: int) -> list[CheckRow]:
    """The bucket-cap slider on warm ranks: its first draw, then moves between two caps, each
    timed from `slider.value = cap` until the redrawn figure is in the widget."""
    from dpviz.lessons.buckets.live import bucket_cap_slider, sweep_config
    from dpviz.engine.launch import Cluster

    cfg = sweep_config(steps=2).replace(backend=backend, device=device, world_size=ranks)
    with Cluster(ranks, backend, cfg.timeout_s, device=device) as cluster:
        t0 = time.perf_counter()
        panel = bucket_cap_slider(cluster, cfg, value=1.0)
        first = time.perf_counter() - t0
        slider = panel.children[0].children[0]
        moves = []
        for i in range(SLIDER_MOVES):
            t0 = time.perf_counter()
            slider.value = 0.25 if i % 2 == 0 else 1.0
            moves.append(time.perf_counter() - t0)
    return [CheckRow(f"cap slider ({backend}, {device}, {ranks} rank{'s' * (ranks > 1)})", True,
                     dict(first_draw_s=first, move_median_s=statistics.median(moves),
                          move_max_s=max(moves), moves=len(moves)),
                     "a move: ranks re-run DDP with the new cap, record, figure redrawn")]


def check(out: Path, started: float) -> GpuCheck:
    """Every check, in order; the CUDA ones where torch sees a GPU. `started`: perf_counter
    when the script began (torch's import counts against the budget too)."""
    env = environment()
    gpus = env["gpu_count"]
    rows = []
    if gpus:
        rows += _timed("nccl run", lambda: run_check(f"nccl ×{gpus}", out / "nccl", "nccl", "cuda",
                                                     gpus, GPU_RUN))
        rows += _timed("gloo on cuda run", lambda: run_check("gloo ×2 on cuda", out / "gloo-cuda", "gloo",
                                                             "cuda", 2, GPU_RUN))
        traced = out / "nccl"
    else:
        rows += _timed("gloo run", lambda: run_check("gloo ×2 on cpu", out / "gloo", "gloo", "cpu", 2, CPU_RUN))
        traced = out / "gloo"
    rows += _timed("trace tools", lambda: trace_tools_check(traced, out))
    rows += _timed("checkpointing", lambda: checkpointing_check(bool(gpus)))
    backend, device, ranks = ("nccl", "cuda", gpus) if gpus else ("gloo", "cpu", 2)
    rows += _timed("cap slider", lambda: slider_check(backend, device, ranks))
    return GpuCheck(mode="cuda" if gpus else "cpu", environment=env, rows=tuple(rows),
                    seconds=round(time.perf_counter() - started, 1),
                    date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    p = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/gpu-check", help="folder for gpu-check.json, gpu-check.txt "
                   "and what the checks wrote (default %(default)s)")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")   # the slider draws off screen
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = check(out, started)
    json_path, text_path = result.write(out)
    print(result.table())
    print(f"wrote {json_path} and {text_path}", file=sys.stderr)
    return 0 if result.passed else 1

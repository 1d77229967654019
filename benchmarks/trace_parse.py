"""Trace parsing throughput (events/s) and peak memory: dpviz's streaming load vs json.load.

Measured side by side in one process, medians of repeats, on
  the real A100 NCCL trace in tests/data (.json.gz, ~40k events), and
  a long trace made from it: its events repeated --scale times, shifted in time (plain .json).
  json.load   = parse the whole file into Python objects (no classification at all)
  stream      = dpviz.analysis.trace_files.stream_events: one event at a time, nothing kept
  load_trace  = stream + classify + link kernels to launches + build the RunRecord
Peak memory (tracemalloc, one run each) shows what streaming buys on large files.
Usage: python benchmarks/trace_parse.py [--scale 8] [--repeats 3]
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from dpviz.analysis.trace_files import load_trace, stream_events

A100 = Path(__file__).resolve().parent.parent / "tests" / "data" / "a100-nccl-ddp-rank0.json.gz"


def read_json(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def long_trace(scale: int, folder: Path) -> Path:
    """The A100 trace's events `scale` times, each copy after the last (ids kept distinct)."""
    trace = read_json(A100)
    events = [e for e in trace["traceEvents"] if e.get("ph") != "M"]
    times = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(times) - min(times) + 1.0
    out = [e for e in trace["traceEvents"] if e.get("ph") == "M"]
    for i in range(scale):
        for e in events:
            e = dict(e, ts=e["ts"] + i * span) if "ts" in e else dict(e)
            if e.get("cat") == "ac2g":
                e["id"] = e["id"] + i * 10**7
            if isinstance(e.get("args"), dict) and "correlation" in e["args"]:
                e["args"] = dict(e["args"], correlation=e["args"]["correlation"] + i * 10**7)
            if e.get("name", "").startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + 10 * i}"
            out.append(e)
    path = folder / "long-rank0.json"
    path.write_text(json.dumps({**trace, "traceEvents": out}))
    return path


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def peak_mb(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1e6


def measure(path: Path, repeats: int) -> None:
    n = len(read_json(path)["traceEvents"])
    runs = {
        "json.load": lambda: read_json(path),
        "stream": lambda: stream_events(path, lambda ev: None),
        "load_trace": lambda: load_trace(path),
    }
    seconds = {name: statistics.median(timed(fn) for _ in range(repeats)) for name, fn in runs.items()}
    print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB on disk, {n:,} events")
    for name, s in seconds.items():
        print(f"  {name:11s} {s:7.3f} s  {n / s:>12,.0f} events/s  "
              f"({seconds['json.load'] / s:4.2f} x json.load's rate)")
    print(f"  peak memory: json.load {peak_mb(runs['json.load']):.0f} MB, "
          f"load_trace {peak_mb(runs['load_trace']):.0f} MB (tracemalloc)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    measure(A100, args.repeats)
    with tempfile.TemporaryDirectory() as folder:
        measure(long_trace(args.scale, Path(folder)), args.repeats)


if __name__ == "__main__":
    main()

"""dpviz vs Holistic Trace Analysis on the same trace: parse + comm/comp overlap, side by side.

HTA lives in its own virtual environment (never in dpviz's install); make one with
    python3 -m venv /path/hta && /path/hta/bin/pip install holistictraceanalysis==0.5.0 torch==2.13.0
and pass its interpreter with --hta-python (or HTA_PYTHON). Each repeat runs HTA (in a
subprocess, timed inside it: TraceAnalysis(trace_dir) + get_comm_comp_overlap, not the
interpreter start nor its imports) and then dpviz (load_trace + comm_compute_overlap +
summarize) and stdlib json.load of the same file, interleaved so load drift hits all alike.
Prints medians, the ratio HTA / dpviz, and both overlap figures (they must agree).
Usage: python benchmarks/hta_vs_dpviz.py [--trace PATH] [--repeats 5] [--hta-python PY]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpviz.overlap import comm_compute_overlap, summarize
from dpviz.traces.files import load_trace

A100 = Path(__file__).resolve().parent.parent / "tests" / "data" / "a100-nccl-ddp-rank0.json.gz"
HTA_SCRIPT = """
import json, logging, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
overlap = analysis.get_comm_comp_overlap(visualize=False)
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "overlap_pct": float(overlap["comp_comm_overlap_pctg"][0])}))
"""


def run_hta(python: str, folder: Path) -> dict:
    done = subprocess.run([python, "-c", HTA_SCRIPT, str(folder)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_dpviz(trace: Path) -> dict:
    t0 = time.perf_counter()
    record = load_trace(trace)
    overlap = comm_compute_overlap(record, record.config["ranks"][0])
    summarize(record)
    return {"seconds": time.perf_counter() - t0, "overlap_pct": 100 * overlap}


def run_json_load(trace: Path) -> float:
    t0 = time.perf_counter()
    with gzip.open(trace, "rt") if trace.suffix == ".gz" else open(trace) as f:
        json.load(f)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=A100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON"),
                   help="python of a venv with holistictraceanalysis==0.5.0 (or set HTA_PYTHON)")
    args = p.parse_args()
    if not args.hta_python:
        sys.exit("give --hta-python (a venv with holistictraceanalysis==0.5.0): see this file's doc")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)   # HTA reads a folder of per-rank traces
        shutil.copy(args.trace, folder / args.trace.name)
        hta, dpviz, stdlib = [], [], []
        for _ in range(args.repeats):
            hta.append(run_hta(args.hta_python, folder))
            dpviz.append(run_dpviz(args.trace))
            stdlib.append(run_json_load(args.trace))
    med = lambda runs: statistics.median(r["seconds"] for r in runs)
    print(f"{args.trace.name}, {args.repeats} interleaved repeats, medians:")
    print(f"  HTA 0.5.0  parse + overlap              {med(hta):6.3f} s  overlap {hta[0]['overlap_pct']:.2f}%")
    print(f"  dpviz      load_trace + overlap + rows  {med(dpviz):6.3f} s  overlap {dpviz[0]['overlap_pct']:.2f}%")
    print(f"  json.load  alone (stdlib)               {statistics.median(stdlib):6.3f} s")
    print(f"  dpviz is {med(hta) / med(dpviz):.2f}x faster than HTA")


if __name__ == "__main__":
    main()

"""dpviz vs Holistic Trace Analysis on the same traces, both measured the same way.

HTA lives in its own virtual environment (never in dpviz's install); make one with
    python3.11 -m venv /path/hta && /path/hta/bin/pip install holistictraceanalysis==0.5.0
and pass its interpreter with --hta-python (or HTA_PYTHON).

Every measurement runs in a fresh process of its own, HTA's and dpviz's alike, interleaved
repeat by repeat so load drift hits both:
  in process  : inside the child, after its imports: read the traces + comm/comp overlap +
                temporal breakdown (HTA: TraceAnalysis(dir) + get_comm_comp_overlap +
                get_temporal_breakdown; dpviz: load_trace(dir) + comm_compute_overlap per
                rank + temporal_breakdown + the per-step rows);
  whole       : the child's wall time from start to exit, interpreter and imports included;
  load-trace  : `python -m dpviz load-trace DIR --out TMP` (PNG figures), whole process;
  peak memory : the largest resident set of any process in the child's tree (workers too).
Prints medians, the ratios HTA / dpviz and both tools' figures (they must agree).
Trace sets: every tests/data/<scenario>/ folder, and 8 copies of the A100 rank relabelled as
ranks 0-7 (an 8-rank set, built in a temporary folder).
Usage: python benchmarks/hta_vs_dpviz.py [--repeats 3] [--hta-python PY] [--only NAME]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

HTA_SCRIPT = """
import json, logging, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
try:   # HTA cannot read some traces at all (tests/data/*/PROVENANCE.md says which and why)
    analysis = TraceAnalysis(trace_dir=sys.argv[1])
except Exception as err:
    print(json.dumps({"seconds": time.perf_counter() - t0, "error": type(err).__name__}))
    sys.exit()
overlap = analysis.get_comm_comp_overlap(visualize=False)
try:
    analysis.get_temporal_breakdown(visualize=False)
except Exception:   # HTA's breakdown raises on traces without an event on a GPU stream
    pass
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds,
                  "overlap_pct": [float(x) for x in overlap["comp_comm_overlap_pctg"]]}))
"""
DPVIZ_SCRIPT = """
import json, sys, time
from dpviz.analysis.trace_files import load_trace
from dpviz.analysis.overlap import comm_compute_overlap, record_ranks, summarize, temporal_breakdown
t0 = time.perf_counter()
record = load_trace(sys.argv[1])
overlap = [comm_compute_overlap(record, r) for r in record_ranks(record)]
temporal_breakdown(record)
summarize(record)
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds,
                  "overlap_pct": [float("nan") if o is None else 100 * o for o in overlap]}))
"""


def child(argv: list[str], env: dict | None = None) -> dict:
    """Run one measurement in a fresh process: its own report, its whole wall time, and the
    largest resident set any process of its tree reached (sampled every 10 ms, workers and
    their pools included: both tools parse ranks in worker processes)."""
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = 0
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max([peak, *(q.memory_info().rss for q in tree)])
        except psutil.Error:
            pass
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed:\n{stderr[-2000:]}")
    last = stdout.strip().splitlines()[-1] if stdout.strip() else "{}"
    out = json.loads(last) if last.startswith("{") else {}
    return out | {"wall": wall, "peak_mb": peak / 2**20}


def eight_ranks(folder: Path) -> Path:
    data = json.loads(gzip.decompress((DATA / "a100-nccl-ddp-rank0.json.gz").read_bytes()))
    for r in range(8):
        data["distributedInfo"] |= {"rank": r, "world_size": 8}
        with gzip.open(folder / f"rank{r}.json.gz", "wt") as f:
            json.dump(data, f)
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON"),
                   help="python of a venv with holistictraceanalysis==0.5.0 (or set HTA_PYTHON)")
    p.add_argument("--only", help="run only the trace sets whose name contains this")
    args = p.parse_args()
    if not args.hta_python:
        sys.exit("give --hta-python (a venv with holistictraceanalysis==0.5.0): see this file's doc")
    env = os.environ | {"PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians of "
          f"{args.repeats} interleaved repeats, each in a fresh process")
    with tempfile.TemporaryDirectory() as tmp:
        sets = {p.name: p for p in sorted(DATA.iterdir()) if (p / "hta-0.5.0.json").is_file()}
        sets["8-ranks (A100 x8)"] = eight_ranks(Path(tmp))
        for name, folder in sets.items():
            if args.only and args.only not in name:
                continue
            runs: dict[str, list[dict]] = {"hta": [], "dpviz": [], "cli": []}
            for i in range(args.repeats):
                runs["hta"].append(child([args.hta_python, "-c", HTA_SCRIPT, str(_hta_dir(folder, tmp))]))
                runs["dpviz"].append(child([sys.executable, "-c", DPVIZ_SCRIPT, str(folder)], env))
                runs["cli"].append(child([sys.executable, "-m", "dpviz", "load-trace", str(folder),
                                          "--out", f"{tmp}/out-{i}"], env))
            med = {k: {m: statistics.median(r[m] for r in v) for m in v[0] if m in ("seconds", "wall", "peak_mb")}
                   for k, v in runs.items()}
            h, d, c = med["hta"], med["dpviz"], med["cli"]
            print(f"\n{name}:")
            print(f"  in process  HTA {h['seconds']:7.3f} s   dpviz {d['seconds']:7.3f} s   "
                  f"dpviz {h['seconds'] / d['seconds']:5.1f}x faster")
            print(f"  whole       HTA {h['wall']:7.3f} s   dpviz {d['wall']:7.3f} s   "
                  f"dpviz {h['wall'] / d['wall']:5.1f}x faster")
            print(f"  load-trace  (whole process, PNG figures) {c['wall']:7.3f} s   "
                  f"{'<=' if c['wall'] <= h['wall'] else '>'} HTA's whole {h['wall']:.3f} s")
            print(f"  peak memory HTA {h['peak_mb']:7.0f} MB   dpviz {d['peak_mb']:7.0f} MB   "
                  f"load-trace {c['peak_mb']:.0f} MB (largest process of each tree)")
            hta_says = (f"cannot read it ({runs['hta'][0]['error']})" if "error" in runs["hta"][0]
                        else _pcts(runs["hta"][0]))
            print(f"  overlap %   HTA {hta_says}   dpviz {_pcts(runs['dpviz'][0])}")


def _hta_dir(folder: Path, tmp: str) -> Path:
    """HTA reads every file of a folder: the traces alone (no PROVENANCE.md, no reference)."""
    clean = Path(tmp) / "hta" / folder.name
    if not clean.exists():
        clean.mkdir(parents=True)
        for f in folder.iterdir():
            if f.name.endswith((".json", ".json.gz")) and not f.name.startswith("hta-"):
                (clean / f.name).symlink_to(f.resolve())
    return clean


def _pcts(run: dict) -> str:
    return ", ".join("n/a" if v != v else f"{v:.2f}" for v in run.get("overlap_pct", []))


if __name__ == "__main__":
    main()

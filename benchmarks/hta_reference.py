"""Reference figures from Holistic Trace Analysis for the trace folders of tests/data.

Run once, with the python of HTA's own venv (never dpviz's):
    /work/venvs/hta/bin/python benchmarks/hta_reference.py tests/data/rccl-mi250 ...
Writes `hta-0.5.0.json` into each folder: per rank, HTA's comm/comp overlap (percent) and
temporal breakdown (idle/compute/non-compute percent, window in µs), or the error HTA
raised. tests/test_hta_parity.py reads these files, so CI needs no HTA.
"""
from __future__ import annotations

import json
import logging
import platform
import sys
import tempfile
import shutil
from importlib.metadata import version
from pathlib import Path


def figures(folder: Path) -> dict:
    from hta.trace_analysis import TraceAnalysis

    out: dict = {"hta": version("HolisticTraceAnalysis"), "pandas": version("pandas"),
                 "python": platform.python_version(), "files": sorted(
                     p.name for p in folder.iterdir() if p.name.endswith((".json", ".json.gz"))
                     and not p.name.startswith("hta-"))}
    with tempfile.TemporaryDirectory() as tmp:   # HTA reads every file of its folder
        for name in out["files"]:
            shutil.copy(folder / name, Path(tmp) / name)
        try:
            analysis = TraceAnalysis(trace_dir=tmp)
        except Exception as err:   # record what HTA says, as data
            return out | {"error": f"TraceAnalysis: {type(err).__name__}: {err}"}
        try:
            overlap = analysis.get_comm_comp_overlap(visualize=False)
            out["overlap_pct"] = {str(int(r)): _num(v) for r, v in
                                  zip(overlap["rank"], overlap["comp_comm_overlap_pctg"])}
        except Exception as err:
            out["overlap_error"] = f"{type(err).__name__}: {err}"
        try:
            b = analysis.get_temporal_breakdown(visualize=False)
            out["breakdown"] = {str(int(row["rank"])): {
                "idle_pct": _num(row["idle_time_pctg"]), "compute_pct": _num(row["compute_time_pctg"]),
                "non_compute_pct": _num(row["non_compute_time_pctg"]),
                "window_us": _num(row["idle_time(us)"] + row["compute_time(us)"]
                                  + row["non_compute_time(us)"])} for _, row in b.iterrows()}
        except Exception as err:
            out["breakdown_error"] = f"{type(err).__name__}: {err}"
    return out


def _num(value) -> float | None:
    value = float(value)
    return None if value != value else round(value, 4)   # NaN → None


def main() -> None:
    logging.disable(logging.WARNING)
    for arg in sys.argv[1:]:
        folder = Path(arg)
        data = figures(folder)
        (folder / "hta-0.5.0.json").write_text(json.dumps(data, indent=1) + "\n")
        print(folder, json.dumps({k: v for k, v in data.items() if k not in ("files",)}))


if __name__ == "__main__":
    main()

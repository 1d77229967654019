"""The whole nbval suite's wall time here (aim: ≤ 5 min), and each notebook's share.

Runs `pytest --nbval-lax notebooks/` once per notebook, as CI runs them (a fresh kernel each).
Usage: python benchmarks/notebooks.py
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def main() -> None:
    total, rows = 0.0, []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider",
                               str(path)], capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        total += seconds
        rows.append((path.stem, seconds, "ok" if done.returncode == 0 else "FAILED"))
    for name, seconds, status in rows:
        print(f"{name:40s} {seconds:6.1f} s  {status}")
    print(f"{'all notebooks':40s} {total:6.1f} s  = {total / 300:.2f} of the 5-minute aim")


if __name__ == "__main__":
    main()

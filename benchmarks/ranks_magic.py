"""What a learner waits for with the `%%ranks` magic, medians over repeats:
  cold cell  = `%load_ext dpviz` and `%ranks 2` in one cell of a fresh interpreter: all of a
               cold start (the forkserver's one torch import, started by `%load_ext`)
  cold start = `%ranks 2` in a fresh interpreter, a cell after `%load_ext dpviz` and READ_S
               seconds of reading, goal <= 3 s
  restart    = `%ranks 2` after `%ranks stop` in the same kernel (the forkserver is warm)
  warm cell  = a `%%ranks` cell doing one small all-reduce on 2 warm ranks, goal <= 0.2 s
  recorded   = the same cell with --record (profiler, traces read, figure drawn)
Usage: python benchmarks/ranks_magic.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import time

CELL = "%%ranks\nt = torch.ones(3) * (rank + 1)\ndist.all_reduce(t)\nt.tolist()\n"
READ_S = 3.0   # a learner reading the markdown between `%load_ext dpviz` and `%ranks 2`
_COLD = ("import time\nfrom IPython.core.interactiveshell import InteractiveShell\n"
         "sh = InteractiveShell.instance(); t0 = time.perf_counter()\n"
         "sh.run_cell('%load_ext dpviz'); time.sleep({read_s}); t1 = time.perf_counter()\n"
         "assert sh.run_cell('%ranks 2').success\n"
         "print(time.perf_counter() - t1, time.perf_counter() - t0 - {read_s})\n"
         "sh.run_cell('%ranks stop')\n")


def cold_start_s(read_s: float) -> float:
    """Seconds of `%ranks 2` in a fresh interpreter, `read_s` after `%load_ext dpviz`; with
    `read_s` 0, the seconds of both (one cell)."""
    out = subprocess.run([sys.executable, "-c", _COLD.format(read_s=read_s)], capture_output=True,
                         text=True, check=True, timeout=300)
    return float(out.stdout.split()[-1 if read_s == 0 else -2])


def timed_cell(shell, source: str) -> float:
    """Seconds one cell takes, its printed output swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        t0 = time.perf_counter()
        result = shell.run_cell(source)
        seconds = time.perf_counter() - t0
    result.raise_error()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    from IPython.core.interactiveshell import InteractiveShell

    cold_cell, cold = [], []
    for _ in range(args.repeats):   # interleaved
        cold_cell.append(cold_start_s(0.0))
        cold.append(cold_start_s(READ_S))
    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext dpviz")
    timed_cell(shell, "%ranks 2")
    restart = []
    for _ in range(args.repeats):
        timed_cell(shell, "%ranks stop")
        restart.append(timed_cell(shell, "%ranks 2"))
    timed_cell(shell, CELL)   # the ranks' first cell makes their namespace and gloo's buffers
    warm = [timed_cell(shell, CELL) for _ in range(4 * args.repeats)]
    recorded = [timed_cell(shell, CELL.replace("%%ranks", "%%ranks --record")) for _ in range(args.repeats)]
    shell.run_cell("%ranks stop")
    med = statistics.median
    print(f"load average {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"%load_ext dpviz + %ranks 2, one cold cell: median {med(cold_cell):.2f} s over "
          f"{len(cold_cell)} (min {min(cold_cell):.2f}, max {max(cold_cell):.2f})")
    print(f"%ranks 2, cold, {READ_S:g} s after %load_ext: median {med(cold):.2f} s over {len(cold)} "
          f"(min {min(cold):.2f}, max {max(cold):.2f}); goal <= 3 s")
    print(f"%ranks 2, restart (forkserver warm): median {med(restart):.2f} s over {len(restart)}")
    print(f"warm 2-rank %%ranks all-reduce cell:  median {med(warm) * 1e3:.1f} ms over {len(warm)} "
          f"(min {min(warm) * 1e3:.1f}, max {max(warm) * 1e3:.1f}); goal <= 200 ms")
    print(f"the same cell with --record:          median {med(recorded) * 1e3:.0f} ms over {len(recorded)}")


if __name__ == "__main__":
    main()

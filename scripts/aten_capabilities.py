"""Print the ATEN_CPU_CAPABILITY values this machine supports, one per line.

ATen picks its CPU kernels at start-up (`default`, `avx2`, `avx512` on x86; `sve256` on some
ARM machines) and sums in a different order in each, so a float comparison that passes on one
kernel path can fail on another. CI runs the numeric-equivalence tests under every path listed
here. A value is supported when torch, started with it forced, reports it back (ATen falls
back to the best path the CPU has when asked for one it lacks).

    python scripts/aten_capabilities.py           # every supported value
    python scripts/aten_capabilities.py --extra   # all but the one torch picks by itself
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys

CANDIDATES = {"x86_64": ("default", "avx2", "avx512"), "AMD64": ("default", "avx2", "avx512"),
              "aarch64": ("default", "sve256"), "arm64": ("default", "sve256")}
ASK = "import torch; print(torch.backends.cpu.get_cpu_capability())"


def reported(capability: str | None) -> str:
    """The kernel path torch uses when started with ATEN_CPU_CAPABILITY=`capability`."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    out = subprocess.run([sys.executable, "-c", ASK], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip().lower()


def supported() -> list[str]:
    return [c for c in CANDIDATES.get(platform.machine(), ("default",)) if reported(c) == c]


def main(argv: list[str]) -> None:
    values = supported()
    if "--extra" in argv:
        native = reported(None)
        values = [c for c in values if c != native]
    print("\n".join(values))


if __name__ == "__main__":
    main(sys.argv[1:])

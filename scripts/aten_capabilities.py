"""Print the ATEN_CPU_CAPABILITY values this CPU can run, one per line.

ATen picks its CPU kernels at start-up (`default`, `avx2`, `avx512` on x86; `sve256` on some
ARM machines) and sums in a different order in each, so a float comparison that passes on one
kernel path can fail on another. CI runs the numeric-equivalence tests under every path listed
here.

Torch cannot be asked which paths are safe: started with ATEN_CPU_CAPABILITY=X it reports X
back whatever the CPU has (torch 2.13 reports `AVX512` on a Zen 2), and the process dies later
with an illegal instruction in the first kernel that uses the missing instructions. So a path is
listed only when it is at or below the one torch picks by itself, or when the CPU's own flags
(`/proc/cpuinfo`) show every instruction set ATen's dispatch checks for it.

    python scripts/aten_capabilities.py           # every path this CPU can run
    python scripts/aten_capabilities.py --extra   # all but the one torch picks by itself
    DPVIZ_CPUINFO=tests/data/cpuinfo/zen2.txt python scripts/aten_capabilities.py
                                                  # as a CPU with those flags would (a check)
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

# Each architecture's paths, lowest first.
ORDER = {"x86_64": ("default", "avx2", "avx512"), "AMD64": ("default", "avx2", "avx512"),
         "aarch64": ("default", "sve256"), "arm64": ("default", "sve256")}
# What ATen's CPU dispatch checks before it takes a path (aten/src/ATen/native/DispatchStub.cpp):
# AVX-512 F, BW, VL and DQ for `avx512`; AVX2 and FMA for `avx2`; SVE for `sve256`, which also
# needs 256-bit vectors (the kernel's `sve_default_vector_length`, in bytes, shows that).
NEEDS = {"avx2": frozenset({"avx2", "fma"}),
         "avx512": frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
         "sve256": frozenset({"sve"})}
SVE256_BYTES = 32
ASK = "import torch; print(torch.backends.cpu.get_cpu_capability())"


def runnable(machine: str, flags: frozenset[str], native: str,
             sve_vector_bytes: int | None = None) -> list[str]:
    """The paths a CPU of `machine` with `flags` can run, lowest first.

    `native` is the path torch picks with no override: it and every path below it run. A path
    above it runs only when `flags` hold everything ATen checks for it.
    """
    order = ORDER.get(machine, ("default",))
    ceiling = order.index(native) if native in order else 0
    return [path for rank, path in enumerate(order)
            if rank <= ceiling or _flags_show(path, flags, sve_vector_bytes)]


def _flags_show(path: str, flags: frozenset[str], sve_vector_bytes: int | None) -> bool:
    needs = NEEDS.get(path)
    if needs is None or not needs <= flags:
        return False
    return path != "sve256" or sve_vector_bytes == SVE256_BYTES


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The instruction-set flags of a `/proc/cpuinfo` text (x86 `flags`, ARM `Features`)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def torch_pick() -> str:
    """The kernel path torch picks by itself (ATEN_CPU_CAPABILITY unset)."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    out = subprocess.run([sys.executable, "-c", ASK], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip().lower()


def native(machine: str, flags: frozenset[str], picked: str,
           sve_vector_bytes: int | None = None) -> str:
    """Torch's own pick, lowered to the highest path the flags show where flags were read.

    On a real CPU the two agree (torch reads the same flags); the lowering matters when
    DPVIZ_CPUINFO stands another CPU's flags in for this one's, to check that CPU's run here.
    """
    order = ORDER.get(machine, ("default",))
    if not flags or picked not in order:
        return picked
    shown = [p for p in order[: order.index(picked) + 1]
             if p == "default" or _flags_show(p, flags, sve_vector_bytes)]
    return shown[-1]


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:  # not Linux, or no SVE: no flags seen, so only paths up to torch's own run
        return ""


def main(argv: list[str]) -> None:
    machine = platform.machine()
    flags = cpu_flags(_read(os.environ.get("DPVIZ_CPUINFO", "/proc/cpuinfo")))
    sve_text = _read("/proc/sys/abi/sve_default_vector_length").strip()
    sve_bytes = int(sve_text) if sve_text.isdigit() else None
    own = native(machine, flags, torch_pick(), sve_bytes)
    paths = runnable(machine, flags, own, sve_bytes)
    if "--extra" in argv:
        paths = [p for p in paths if p != own]
    print("\n".join(paths))


if __name__ == "__main__":
    main(sys.argv[1:])

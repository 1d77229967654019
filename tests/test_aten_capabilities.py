"""scripts/aten_capabilities.py lists the kernel paths a CPU can run, from its flags.

Torch echoes any forced ATEN_CPU_CAPABILITY back and then dies in the first kernel that uses
the missing instructions, so these checks feed the detection other CPUs' flags (tests/data/cpuinfo)
and never force a path on this machine.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CPUINFO = ROOT / "tests" / "data" / "cpuinfo"
SCRIPT = ROOT / "scripts" / "aten_capabilities.py"
_spec = importlib.util.spec_from_file_location("aten_capabilities", SCRIPT)
caps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(caps)


def flags(name: str) -> frozenset[str]:
    return caps.cpu_flags((CPUINFO / name).read_text())


def test_a_zen2_runs_default_and_avx2_but_never_avx512():
    zen2 = flags("zen2.txt")
    assert {"avx2", "fma"} <= zen2 and not any(f.startswith("avx512") for f in zen2)
    assert caps.runnable("x86_64", zen2, "avx2") == ["default", "avx2"]
    # even were torch told to pick avx512 (it echoes the override), the flags do not show it
    assert caps.native("x86_64", zen2, "avx512") == "avx2"


def test_an_avx512_xeon_runs_all_three_paths():
    xeon = flags("xeon-avx512.txt")
    assert caps.runnable("x86_64", xeon, "avx512") == ["default", "avx2", "avx512"]
    assert caps.native("x86_64", xeon, "avx512") == "avx512"


def test_a_path_torch_picks_below_the_flags_still_runs_the_higher_one_the_flags_show():
    # torch may prefer AVX2 on a CPU that has AVX-512: the flags then add avx512 back
    assert caps.runnable("x86_64", flags("xeon-avx512.txt"), "avx2") == [
        "default", "avx2", "avx512"]


def test_avx512_needs_all_four_of_the_flags_aten_checks():
    partial = flags("xeon-avx512.txt") - {"avx512bw"}
    assert caps.runnable("x86_64", partial, "avx2") == ["default", "avx2"]


def test_arm_runs_sve256_only_with_sve_and_256_bit_vectors():
    graviton3, n1 = flags("graviton3.txt"), flags("neoverse-n1.txt")
    assert caps.runnable("aarch64", graviton3, "default", sve_vector_bytes=32) == [
        "default", "sve256"]
    assert caps.runnable("aarch64", graviton3, "default", sve_vector_bytes=16) == ["default"]
    assert caps.runnable("aarch64", graviton3, "default") == ["default"]
    assert caps.runnable("aarch64", n1, "default", sve_vector_bytes=32) == ["default"]
    assert caps.runnable("aarch64", frozenset(), "sve256") == ["default", "sve256"]


def test_unreadable_flags_keep_torchs_own_pick_and_everything_below_it():
    assert caps.native("x86_64", frozenset(), "avx2") == "avx2"
    assert caps.runnable("x86_64", frozenset(), "avx2") == ["default", "avx2"]


def _script(*argv: str, cpuinfo: Path | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "DPVIZ_CPUINFO")}
    if cpuinfo:
        env["DPVIZ_CPUINFO"] = str(cpuinfo)
    return subprocess.run([sys.executable, str(SCRIPT), *argv], env=env, capture_output=True,
                          text=True, check=True).stdout.split()


def test_the_script_lists_this_cpus_own_paths_lowest_first():
    here = _script()
    assert here[0] == "default" and set(here) <= {"default", "avx2", "avx512", "sve256"}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the Zen 2 stand-in is an x86 check")
def test_the_script_run_with_a_zen2s_flags_lists_no_avx512():
    assert _script(cpuinfo=CPUINFO / "zen2.txt") == ["default", "avx2"]
    assert _script("--extra", cpuinfo=CPUINFO / "zen2.txt") == ["default"]

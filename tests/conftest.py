"""Shared fixtures: one warm 2-rank cluster per test module, and a process-table check."""
from __future__ import annotations

import os

import pytest

from dpviz import Cluster


@pytest.fixture(scope="module")
def cluster2():
    with Cluster(2) as cluster:
        yield cluster


def rank_processes() -> set[int]:
    """Live rank processes of this test process: spawned children, or children of its
    forkserver (dpviz forks ranks from one), not multiprocessing's other helpers."""
    from multiprocessing import forkserver

    server = forkserver._forkserver._forkserver_pid
    spawned = {pid for pid in children_of(os.getpid()) if "spawn_main" in _cmdline(pid)}
    return spawned | (set(children_of(server)) if server and alive(server) else set())


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children_of(pid: int) -> list[int]:
    """Live child processes of `pid` (from /proc), ignoring zombies."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid == pid and state != "Z":
            kids.append(int(entry))
    return kids


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

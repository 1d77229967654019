"""Nothing dpviz starts listens beyond this machine: the rendezvous store, the ranks' gloo
pairs and the forkserver are on loopback (torchrun's case is in test_torchrun.py)."""
from __future__ import annotations

import os
from datetime import timedelta

import pytest

from dpviz import Cluster
from dpviz.engine.launch import loopback_store
from listening import beyond_loopback, listening


def _noop(ctx) -> int:
    return ctx.rank


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_a_live_cluster_listens_on_loopback_only(start_method):
    with Cluster(2, start_method=start_method) as cluster:
        assert cluster.run_task(_noop) == [0, 1]   # warm ranks, process group up
        sockets = listening(os.getpid())
    store_ports = {port for pid, _, port in sockets if pid == os.getpid()}
    assert store_ports, sockets                  # the store's server is this process
    assert len({pid for pid, _, _ in sockets}) >= 3   # and both ranks' gloo pairs listen too
    assert beyond_loopback(sockets) == set(), sockets


def test_the_check_sees_a_store_on_every_interface():
    """The check above can fail: torch's own master store binds the wildcard address."""
    import torch.distributed as dist

    wide = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                         timeout=timedelta(seconds=5))
    try:
        assert {s[2] for s in beyond_loopback(listening(os.getpid()))} == {wide.port}
    finally:
        del wide
    narrow = loopback_store(dist, 5.0)
    try:
        mine = {s for s in listening(os.getpid()) if s[2] == narrow.port}
        assert mine and beyond_loopback(mine) == set()
        client = dist.TCPStore("127.0.0.1", narrow.port, is_master=False, timeout=timedelta(seconds=5))
        client.set("key", "value")
        assert narrow.get("key") == b"value"
    finally:
        del narrow

"""The launcher: warm ranks, real collectives, and failures that name the rank and leave no process."""
from __future__ import annotations

import os
import time

import pytest

from dpviz import Cluster, RankError, RankTimeout, RunConfig, run
from dpviz.engine.launch import cuda_device_count, using_cluster

from conftest import alive, rank_processes
import rank_tasks


def test_ranks_are_separate_processes_with_their_rank(cluster2):
    out = cluster2.run_task(rank_tasks.whoami)
    assert [o["rank"] for o in out] == [0, 1]
    assert {o["world_size"] for o in out} == {2}
    assert len({o["pid"] for o in out} | {os.getpid()}) == 3


def test_warm_ranks_keep_their_process_group(cluster2):
    pids = cluster2.pids()
    assert cluster2.run_task(rank_tasks.all_reduce_rank_ids) == [1.0, 1.0]  # 0 + 1 on both
    assert cluster2.run_task(rank_tasks.all_reduce_rank_ids) == [1.0, 1.0]
    assert cluster2.pids() == pids  # the same processes answered twice


def test_what_a_task_frees_after_its_reply_lives_until_the_reply_then_goes(cluster2):
    """`ctx.free_after_reply` keeps an object past the task's own references (freed after
    the result is sent, not while the caller waits for it), and a warm rank does not keep it
    into the next task."""
    assert cluster2.run_task(rank_tasks.hold_until_replied, "profile") == [True, True]
    assert all("profile" in names for names in cluster2.run_task(rank_tasks.dropped))


def test_using_cluster_lends_a_warm_cluster_and_stops_only_ranks_it_started(cluster2):
    with using_cluster(cluster2, 3) as lent:      # a given cluster is used as it is
        assert lent is cluster2
    assert cluster2.alive
    before = rank_processes()
    with using_cluster(None, 2) as fresh:
        pids = fresh.pids()
        assert fresh.run_task(rank_tasks.all_reduce_rank_ids) == [1.0, 1.0]
    assert not any(alive(p) for p in pids)        # fresh ranks stop with the block
    assert rank_processes() <= before
    with pytest.raises(ValueError, match="this cluster has 2 gloo ranks but the config asks for 3"):
        with using_cluster(cluster2, 3, exact=True):
            pass


def test_rank_that_raises_is_named_with_its_traceback_and_nothing_is_left():
    before = rank_processes()
    with Cluster(2, timeout_s=30) as cluster:
        pids = cluster.pids()
        with pytest.raises(RankError) as err:
            cluster.run_task(rank_tasks.raise_on, 1)
        assert err.value.rank == 1
        assert "deliberate failure on rank 1" in str(err.value)
        assert "Traceback" in str(err.value)
        assert not any(alive(p) for p in pids)
        # the cluster starts fresh ranks for the next task
        assert cluster.run_task(rank_tasks.all_reduce_rank_ids) == [1.0, 1.0]
    assert rank_processes() <= before


def test_rank_that_dies_is_named():
    before = rank_processes()
    with Cluster(2, timeout_s=30) as cluster:
        pids = cluster.pids()
        with pytest.raises(RankError, match=r"rank 0: died .*exit code 7"):
            cluster.run_task(rank_tasks.die_on, 0)
        assert not any(alive(p) for p in pids)
    assert rank_processes() <= before


def test_rank_hung_mid_collective_times_out_naming_it_and_leaves_no_orphans():
    before = rank_processes()
    with Cluster(2, timeout_s=60) as cluster:
        pids = cluster.pids()
        t0 = time.monotonic()
        with pytest.raises(RankTimeout) as err:
            cluster.run_task(rank_tasks.hang_in_collective_on, 1, timeout_s=3)
        assert time.monotonic() - t0 < 15
        assert 1 in err.value.ranks
        assert not any(alive(p) for p in pids)
    assert rank_processes() <= before


def test_functions_defined_in_a_notebook_are_refused_before_spawning():
    def local(ctx):
        return 0

    before = rank_processes()
    cluster = Cluster(2)
    with pytest.raises(ValueError, match="top level of an importable module"):
        cluster.run_task(local)
    assert not cluster.alive and rank_processes() <= before


@pytest.mark.parametrize("ranks", [0, -1, 99, "2", 2.5])
def test_bad_world_sizes_are_refused_before_spawning(ranks):
    before = rank_processes()
    with pytest.raises(ValueError, match="ranks"):
        Cluster(ranks)
    assert rank_processes() <= before


def test_nccl_without_gpus_is_refused():
    with pytest.raises(ValueError, match="one GPU per rank"):
        Cluster(2, backend="nccl")


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a GPU")
def test_a_run_asking_for_more_gpus_than_there_are_is_refused_before_spawning():
    """The GPU count is the machine's, not the config's: the launcher checks it before a rank
    starts, for a run as for a bare Cluster."""
    before = rank_processes()
    with pytest.raises(ValueError, match="one GPU per rank"):
        run(RunConfig(backend="nccl"))
    assert rank_processes() <= before


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused():
    with pytest.raises(ValueError, match="device cuda needs a GPU"):
        Cluster(2, device="cuda")


def test_ranks_exit_when_their_parent_is_killed(tmp_path):
    """A kernel killed with -9 must not leave its ranks behind (their watchdog sees it)."""
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
        "from dpviz import Cluster\n"
        "if __name__ == '__main__':\n"
        "    c = Cluster(2); c.start()\n"
        "    print(' '.join(map(str, c.pids())), flush=True)\n"
        "    time.sleep(3600)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in pids)


def test_ranks_ignore_sigint_so_a_kernel_interrupt_leaves_them_warm_and_silent(capfd):
    """Jupyter interrupts (and shuts down) a kernel with SIGINT to its process group: the
    ranks must neither die nor print KeyboardInterrupt tracebacks; the parent decides."""
    import signal

    with Cluster(2) as cluster:
        pids = cluster.run_task(rank_tasks.whoami)
        for info in pids:
            os.kill(info["pid"], signal.SIGINT)
        time.sleep(0.5)
        assert cluster.run_task(rank_tasks.whoami) == pids   # same processes, still serving
    assert "KeyboardInterrupt" not in capfd.readouterr().err


def test_a_stopped_cluster_says_when_it_restarts(capfd):
    cluster = Cluster(2)
    try:
        cluster.start()
        assert "restarting" not in capfd.readouterr().err   # the first start is the user's own
        cluster.close()
        cluster.start()
        assert "dpviz: restarting 2 gloo ranks" in capfd.readouterr().err
    finally:
        cluster.close()


def test_cores_note_reads_the_cores_from_the_os():
    import os

    from dpviz.engine.launch import cores_note

    n = len(os.sched_getaffinity(0))
    assert cores_note(4).startswith(f"{n} CPU core") and "shared by the 4 ranks and with" in cores_note(4)
    assert "ranks" not in cores_note()


def test_a_forkserver_that_cannot_start_is_a_rank_error_not_an_eoferror(tmp_path):
    """A preloaded module that fails on import kills the forkserver; the user sees a RankError
    naming the rank, and no process is left behind."""
    import subprocess
    import sys

    (tmp_path / "boom.py").write_text("raise RuntimeError('boom at import')\n")
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import dpviz.engine.launch as launch\n"
        "from dpviz import Cluster, RankError\n"
        "if __name__ == '__main__':\n"
        "    launch.PRELOAD = ['boom']\n"
        "    try:\n"
        "        Cluster(2).start()\n"
        "    except RankError as err:\n"
        "        print('RankError', err.rank, err)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.stdout.startswith("RankError 0 rank 0: could not be started"), out.stdout + out.stderr
    assert "boom at import" in out.stderr

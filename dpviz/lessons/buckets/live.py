"""DDP's gradient buckets on live ranks: torch's own bucket assignment, and the cap sweep.

What a sweep records, and everything that reads a run's buckets (layout, timing, the
predictions), is `dpviz.lessons.buckets.records` (no torch): this module only runs ranks, and binds
the sliders of `dpviz.lessons.buckets.widgets` to them.
"""
from __future__ import annotations

import time
from functools import partial
from typing import Sequence

from dpviz.core.bucket_layout import ONE_BUCKET_CAP_MB
from dpviz.core.config import for_slider
from dpviz.core.record import RunRecord
from dpviz.lessons.buckets.records import BucketSweep, SLIDER_CAPS, cap_label, cap_row, sweep_settled


# what `dpviz.<name>` offers from here
FACADE = ("sweep_buckets", "bucket_cap_slider", "link_bandwidth_slider")


def torch_assignment(ctx, sizes: list[int], order: list[int], limits: list[int]) -> list[list[int]]:
    """Rank task: torch's own bucket assignment (`torch_gate.bucket_assignment`) on float32
    gradients of `sizes` bytes taken in ready `order` (parameter indices), as DDP's rebuild
    calls it."""
    import torch

    from dpviz.engine.torch_gate import bucket_assignment

    tensors = [torch.empty(sizes[i] // 4) for i in order]  # float32: 4 bytes per element
    return bucket_assignment(tensors, limits, order)


def sweep_config(**changes):
    """The sweep's workload: 24 layers of width 256 (256 KiB of gradient each), so caps of
    0.25 to 25 MiB give 24 down to 1 buckets, and a step stays well under 0.1 s on 2 CPU ranks.

    Notebook 03's sliders run it too, at 128 samples per rank: fewer samples would shorten a
    move, but on their own sized links the timing lessons (the cap sweep's U, bucketed
    communication hidden where one bucket exposes it, as tests/test_link.py asserts them) held
    less often, and a smaller batch would not bring a move much closer to the slider's aim
    against a cold re-run (benchmarks/README.md, link_physics.py, has the trials)."""
    from dpviz.core.config import RunConfig

    return RunConfig(layers=24, width=256, batch_per_rank=128, steps=5).replace(**changes)


CAPS_MB = (0.25, 1.0, 4.0, 25.0)


def sweep_buckets(cfg=None, *, cluster=None, caps: Sequence[float] = CAPS_MB, repeats: int = 2,
                  progress: bool = True, warmup: bool = True, cap_s: float | None = None) -> BucketSweep:
    """Re-run the same workload live for each cap on warm ranks; one row per cap.

    Caps run round-robin `repeats` times, so a burst of load on the machine lands on every
    cap rather than on one. With `cap_s`, rounds go on after `repeats` until the link-wait
    verdict's shape is settled (`records.sweep_settled`) or `cap_s` seconds passed. `warmup`
    first runs once untimed.
    """
    from dpviz.engine.launch import using_cluster

    cfg, caps = check_sweep(cfg, caps, repeats)
    if cap_s is not None:
        from dpviz.engine.verdicts import check_cap_s
        cap_s = check_cap_s(cap_s)
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        return _sweep_on(ranks, cfg, caps, repeats, progress, warmup, cap_s)


def check_sweep(cfg, caps: Sequence[float], repeats: int):
    """The sweep's (config, caps as floats), or a ValueError before any rank starts."""
    from dpviz.engine.workloads import validate_run_config

    caps = [float(c) for c in caps]
    if not caps or min(caps) <= 0:
        raise ValueError(f"give at least one bucket cap > 0 (MiB), e.g. 0.25,1,4,25; got {caps}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a whole number >= 1, got {repeats!r}")
    cfg = validate_run_config(cfg or sweep_config())
    if cfg.steps < 3:
        raise ValueError(f"a sweep needs steps >= 3 (step 0 uses one bucket; medians need more), "
                         f"got {cfg.steps}")
    return cfg, caps


def _sweep_on(cluster, cfg, caps: list[float], repeats: int, progress: bool, warmup: bool,
              cap_s: float | None) -> BucketSweep:
    from tqdm.auto import tqdm

    from dpviz.engine.ddp_run import run
    from dpviz.engine.verdicts import MAX_RUNS

    if warmup:  # a cluster's first run pays one-off costs (skip it on ranks that already ran)
        run(cfg.replace(steps=2), cluster=cluster)
    records: dict[float, list[RunRecord]] = {cap: [] for cap in caps}
    bar = tqdm(total=len(caps) * repeats, desc="bucket_cap_mb", disable=not progress)
    start, rounds, result = time.monotonic(), 0, None
    while rounds < repeats or (cap_s is not None and rounds < MAX_RUNS and time.monotonic() - start < cap_s
                               and not sweep_settled(result)):
        bar.total = max(bar.total, len(caps) * (rounds + 1))
        for cap in caps:
            bar.set_postfix_str(cap_label(cap) + ("" if cap >= ONE_BUCKET_CAP_MB else " MiB"))   # as the plot
            records[cap].append(run(cfg.replace(bucket_cap_mb=cap), cluster=cluster))
            bar.update()
        rounds += 1
        result = BucketSweep(config={**cfg.to_dict(), "bucket_cap_mb": None}, world_size=cfg.world_size,
                             rows=tuple(cap_row(*records[cap]) for cap in caps))
    bar.close()
    return result


# --- live sliders: each release re-runs DDP on the warm cluster --------------------------------

def _run_with(cluster, cfg, change, value: float) -> RunRecord:
    from dpviz.engine.ddp_run import run

    return run(change(cfg, value), cluster=cluster)


def _with_cap(cfg, cap: float):
    return cfg.replace(bucket_cap_mb=cap)


def _with_gbps(cfg, gbps: float):
    return cfg.replace(link=cfg.link.with_gbps(gbps))


def bucket_cap_slider(cluster, cfg=None, caps: Sequence[float] = SLIDER_CAPS, value: float = 1.0,
                      model=None):
    """Slider over `caps` (MiB) re-running `cfg` on `cluster`; `model` (an alpha-beta fit)
    outlines each all-reduce's predicted time. Two steps per run: step 1 is already rebuilt.
    The timeline draws the last step and no parameter check, so the slider's runs profile
    that step only, skip the checks and make step 0 a light warm-up that only rebuilds the
    buckets, the first time; later moves build DDP with the rebuilt buckets and skip it
    (`config.for_slider`, `dpviz.engine.warm_ranks`): a move does not wait for a profile, an
    all_gather or a step nobody sees."""
    from dpviz.lessons.buckets.widgets import bucket_cap_panel

    cfg = for_slider(cfg or sweep_config(steps=2))
    if cluster.world_size != cfg.world_size:
        raise ValueError(f"the cluster has {cluster.world_size} ranks, the config {cfg.world_size}: "
                         "pass a matching cfg or Cluster")
    return bucket_cap_panel(partial(_run_with, cluster, cfg, _with_cap), caps, value, model, cluster=cluster)


def link_bandwidth_slider(cluster, cfg, gbps: Sequence[float] | None = None,
                          value: float | None = None):
    """Slider over the emulated link's bandwidth (Gb/s, same latency), re-running `cfg` live:
    fast links leave little to hide, slow ones more than backward can cover. Offers `gbps`,
    default the link's own × ¼ … 10 (`dpviz.core.link.slider_gbps`), starting at `value`, default
    the link's own. Like the cap slider, its runs profile the last step only and skip the
    checks (`config.for_slider`)."""
    from dpviz.lessons.buckets.widgets import link_bandwidth_panel

    from dpviz.core.link import slider_gbps

    values, start = slider_gbps(cfg.link, gbps, value)
    return link_bandwidth_panel(partial(_run_with, cluster, for_slider(cfg), _with_gbps), start,
                                values, cluster=cluster)


ARMS = ("buckets", "one bucket")   # notebook 03 §3's two settings, as its verdict names them


def overlap_verdict(cfg=None, *, cluster=None, cap: float = 1.0, cap_s: float | None = None):
    """Notebook 03 §3 judged on data: `cfg` with `cap` MiB buckets against one bucket, run
    interleaved on the warm ranks until their link wait (`analysis.stragglers.link_wait_ms`:
    exposed communication less waiting for a slower peer) differs beyond the spread, or the
    time cap passes (`dpviz.engine.verdicts`). If the runs' backward no longer holds the one
    `cfg.link` was sized to, the link is re-sized (`size_link` on `cfg` at `cap`) and the
    comparison run again, once. Returns `engine.verdicts.SizedComparison` of `RunRecord`s."""
    from dpviz.analysis.stragglers import link_wait_ms
    from dpviz.engine.launch import using_cluster
    from dpviz.engine.link_sizing import run_backward_ms, size_link
    from dpviz.engine.verdicts import check_cap_s, compare_on_link

    cfg, _ = check_sweep(cfg, [cap], 1)
    cap_s = check_cap_s(cap_s)
    caps = dict(zip(ARMS, (cap, ONE_BUCKET_CAP_MB)))
    with using_cluster(cluster, cfg.world_size, cfg.backend, cfg.timeout_s) as ranks:
        arms = {name: partial(_run_on_link, ranks, cfg.replace(bucket_cap_mb=c)) for name, c in caps.items()}
        return compare_on_link(cfg.link, arms, link_wait_ms, quantity="link wait", cap_s=cap_s,
                               backward_of=run_backward_ms,
                               resize=lambda: size_link(cfg.replace(bucket_cap_mb=cap), cluster=ranks))


def _run_on_link(cluster, cfg, link) -> RunRecord:
    from dpviz.engine.ddp_run import run

    return run(cfg.replace(link=link), cluster=cluster)

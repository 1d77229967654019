"""A bucket_cap_mb slider and a link-bandwidth slider: each release re-runs DDP live on warm
ranks and redraws the step's bucket timeline (about a second on 2 CPU ranks)."""
from __future__ import annotations

from functools import partial
from typing import Sequence

from ..buckets import sweep_config
from ..buckets_records import ONE_BUCKET_CAP_MB
from ..ddp_run import run
from ..plots.buckets import cap_label, plot_bucket_timeline
from .slider import rerun

CAPS = (0.25, 0.5, 1.0, 2.0, 4.0, 25.0, ONE_BUCKET_CAP_MB)


def _run_cap(cluster, cfg, cap: float):
    return run(cfg.replace(bucket_cap_mb=cap), cluster=cluster)


def _draw(ax, record, model=None) -> None:
    plot_bucket_timeline(record, ax=ax, model=model)


def bucket_cap_slider(cluster, cfg=None, caps: Sequence[float] = CAPS, value: float = 1.0,
                      model=None):
    """Slider over `caps` (MiB) re-running `cfg` on `cluster`; `model` (an alpha-beta fit)
    outlines each all-reduce's predicted time. Two steps per run: step 1 is already rebuilt."""
    cfg = cfg or sweep_config(steps=2)
    if cluster.world_size != cfg.world_size:
        raise ValueError(f"the cluster has {cluster.world_size} ranks, the config {cfg.world_size}: "
                         "pass a matching cfg or Cluster")
    if value not in caps:
        raise ValueError(f"value {value} is not one of the caps {list(caps)}")
    return rerun(list(caps), partial(_run_cap, cluster, cfg), partial(_draw, model=model),
                 label="bucket_cap_mb", value=value, figsize=(11, 3.8),
                 format_value=cap_label)


GBPS = (0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 100.0)


def _run_gbps(cluster, cfg, gbps: float):
    return run(cfg.replace(link=cfg.link.with_gbps(gbps)), cluster=cluster)


def link_bandwidth_slider(cluster, cfg, gbps: Sequence[float] = GBPS, value: float | None = None):
    """Slider over the emulated link's bandwidth (Gb/s, same latency), re-running `cfg` live:
    fast links leave little to hide, slow ones more than backward can cover. Starts at
    `value`, default the link's own bandwidth."""
    if cfg.link is None:
        raise ValueError("cfg has no emulated link: pass cfg.replace(link='classroom') or another preset")
    value = cfg.link.gbps if value is None else value
    if value not in gbps:
        raise ValueError(f"value {value} is not one of {list(gbps)}")
    return rerun(list(gbps), partial(_run_gbps, cluster, cfg), _draw, label="link Gb/s", value=value,
                 figsize=(11, 3.8), format_value=lambda g: f"{g:g}")

"""A bucket_cap_mb slider and a link-bandwidth slider: each release re-runs DDP through the `run`
it is given and redraws the step's bucket timeline. No torch here: `buckets.bucket_cap_slider`
and `buckets.link_bandwidth_slider` bind `run` to warm ranks (about a second on 2 CPU ranks)."""
from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

from dpviz.analysis.stragglers import split_medians
from dpviz.core.record import RunRecord
from dpviz.lessons.buckets.plots import cap_label, plot_bucket_timeline
from dpviz.lessons.buckets.records import SLIDER_CAPS, SLIDER_GBPS
from dpviz.widgets.slider import link_panel, rerun
from dpviz.widgets.spread import SettingSpread


def _draw(ax, record: RunRecord, model=None) -> None:
    plot_bucket_timeline(record, ax=ax, model=model)


def waits(record: RunRecord) -> tuple[float, float]:
    """A slider run's (link wait, peer wait), ms: medians over its ranks and analysed steps."""
    split = split_medians(record)
    return split.link_wait_ms, split.peer_wait_ms


def bucket_cap_panel(run: Callable[[float], RunRecord], caps: Sequence[float] = SLIDER_CAPS,
                     value: float = 1.0, model=None, cluster=None):
    """Slider over `caps` (MiB); `run(cap)` returns a run's record; `model` (an alpha-beta fit)
    outlines each all-reduce's predicted time; `cluster`, the ranks `run` uses, lets the
    status line say when a move (re)started them."""
    if value not in caps:
        raise ValueError(f"value {value} is not one of the caps {list(caps)}")
    return rerun(list(caps), run, partial(_draw, model=model), label="bucket_cap_mb", value=value,
                 figsize=(11, 3.8), format_value=cap_label, cluster=cluster, note=SettingSpread(waits).note)


def link_bandwidth_panel(run: Callable[[float], RunRecord], value: float,
                         gbps: Sequence[float] = SLIDER_GBPS, cluster=None):
    """Slider over the emulated link's bandwidth (Gb/s); `run(gbps)` returns a run's record.
    Both sliders' status lines split each run's wait into link and peer wait and give the
    setting's spread so far (`dpviz.widgets.spread`)."""
    return link_panel(run, value, _draw, gbps, figsize=(11, 3.8), cluster=cluster,
                      note=SettingSpread(waits).note)

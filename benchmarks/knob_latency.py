"""Knob → figure: how long a notebook slider takes to show a new figure, warm and cold.

Measured side by side in one process on the same warm 2-rank cluster, medians of moves:
  now     = the widget as shipped: slider.value set → ranks re-run → record → figure redrawn in
            place (kept layout, limits and frame: only what changed is drawn) → PNG bytes in
            the Image widget (the observer runs synchronously)
  whole   = the widget as shipped, but each move draws its kept figure whole (as it did before
            the frame was kept: `whole_draws`), interleaved with `now`'s moves
  before  = the figure path the widgets used to take: the same run, then a new pyplot figure
            drawn and encoded as the inline backend does (bbox_inches="tight": two draws).
            (The run itself is today's for both: 2 steps, the last one profiled, no parameter
            checks, DDP's start-up broadcast skipped where every rank holds the same weights.)
  cold    = the cell re-run from nothing: 2 ranks started, the widget built (one run + draw)
Then one move of each DDP slider as the widget makes it, timed end to end and cut into
consecutive intervals (`move_table`: the rows sum to the move), and by parts (the slowest
rank's parts, then the parent's; `parts_table`), beside the parts the old path had instead: the ranks writing chrome JSON and the parent
reading and parsing it, where now they send the profiler's few needed events in memory.
First notebook 09b's FSDP knobs (`fsdp_table`), each toggle moved there and back: now (the
ranks keep each setting's sharded model, restored before a move) against before (built, sharded
and warmed up on every move), interleaved, then that move by parts and cut into intervals.
To add a widget, add a line to WIDGETS (and a parts_table call for a DDP one).
Timings on a loaded machine are inflated: the load average is printed with every table.
Usage: python benchmarks/knob_latency.py [--moves 8] [--cold 2] [--fsdp-only]
"""
from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from contextlib import contextmanager

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dpviz import Cluster, RunConfig
from dpviz.engine import ddp_run  # noqa: E402
from dpviz.lessons.accumulation.live import (
    DEMO_CONFIG, accumulation_link_slider, k_slider, live_config,
)  # noqa: E402
from dpviz.lessons.averaging.live import compare_averaging, period_slider  # noqa: E402
from dpviz.lessons.buckets.live import bucket_cap_slider, link_bandwidth_slider, sweep_config  # noqa: E402
from dpviz.core.config import for_slider  # noqa: E402
from dpviz.core.link import SLIDER_FACTORS, as_link, slider_gbps  # noqa: E402
from dpviz.engine.launch import Cluster as _Cluster  # noqa: E402
from dpviz.engine.link_sizing import size_link  # noqa: E402
from dpviz.engine.assemble import assemble_run, rank_spans  # noqa: E402
from dpviz.engine.ddp_run import run, train_rank  # noqa: E402
from dpviz.lessons.accumulation.plots import plot_schedule  # noqa: E402
from dpviz.lessons.averaging.plots import plot_drift  # noqa: E402
from dpviz.lessons.buckets.plots import plot_bucket_timeline  # noqa: E402
from dpviz.lessons.fsdp import live as fsdp_live  # noqa: E402
from dpviz.lessons.fsdp.plots import plot_fsdp_step  # noqa: E402
from dpviz.lessons.fsdp.records import FsdpKnobs  # noqa: E402
from dpviz.lessons.fsdp.widgets import FIGSIZE as FSDP_SIZE, fsdp_panel  # noqa: E402
from dpviz.analysis.scan import read_trace  # noqa: E402
from dpviz.widgets.slider import FigurePanel as Figure, caption_html  # noqa: E402


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _old_figure(draw, figsize, record) -> bytes:
    """The old figure path: a new pyplot figure, PNG as matplotlib_inline makes it."""
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    draw(ax, record)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


# name → (build the widget on a cluster, two values to move between (or a function of the
# cluster giving them), old run, draw, figsize), as the sliders run them (config.for_slider)
BUCKETS = for_slider(sweep_config(steps=2))
GPT_BUCKETS = for_slider(RunConfig(model="gpt", steps=2))   # the built-in transformer (dpviz.engine.workloads)
K_LIVE = live_config(DEMO_CONFIG)
K_LINKED = K_LIVE.replace(link="classroom")   # notebook 04 keeps the classroom preset
timeline = lambda ax, r: plot_bucket_timeline(r, ax=ax)
schedule = lambda ax, r: plot_schedule(r, ax=ax)
K_SIZE = (11, 1.4 + 1.2 * DEMO_CONFIG.world_size)
FSDP = fsdp_live.DEMO_CONFIG   # notebook 09b's step; its panel's moves run it light (`_run_knobs`)
FSDP_MOVE = FSDP.replace(warmup="light", checks=False)
_SIZED: list = []


def sized(cluster) -> RunConfig:
    """Notebook 03's config: its workload on a link sized to the backward measured on the
    first cluster asked (as its first cell does), run by its sliders in 2 steps."""
    if not _SIZED:
        workload = sweep_config(steps=4)
        _SIZED.append(workload.replace(link=size_link(workload, cluster=cluster), steps=2))
    return _SIZED[0]


def sized_gbps(cluster) -> tuple[float, float]:
    """The sized link's own bandwidth and twice it, as its slider offers them."""
    values, _ = slider_gbps(sized(cluster).link)
    return values[SLIDER_FACTORS.index(1.0)], values[SLIDER_FACTORS.index(2.0)]


outlined = lambda ax, r: plot_bucket_timeline(r, ax=ax, model=as_link(r.config["link"]).model(r.world_size))
WIDGETS = {
    "bucket_cap_mb (nb 03)": (
        lambda c: bucket_cap_slider(c, value=1.0), (1.0, 2.0),
        lambda c, cap: run(BUCKETS.replace(bucket_cap_mb=cap), cluster=c), timeline, (11, 3.8)),
    "bucket_cap_mb, sized link + alpha-beta outlines (nb 03's cell)": (
        lambda c: bucket_cap_slider(c, sized(c), value=1.0, model=sized(c).link.model(2)), (1.0, 2.0),
        lambda c, cap: run(for_slider(sized(c)).replace(bucket_cap_mb=cap), cluster=c), outlined, (11, 3.8)),
    "bucket_cap_mb, GPT (nb 03, 15)": (
        lambda c: bucket_cap_slider(c, GPT_BUCKETS, value=1.0), (1.0, 2.0),
        lambda c, cap: run(GPT_BUCKETS.replace(bucket_cap_mb=cap), cluster=c), timeline, (11, 3.8)),
    "link Gb/s, sized link (nb 03)": (
        lambda c: link_bandwidth_slider(c, sized(c).replace(bucket_cap_mb=1.0), value=sized_gbps(c)[0]),
        sized_gbps,
        lambda c, g: run(for_slider(sized(c)).replace(bucket_cap_mb=1.0, link=sized(c).link.with_gbps(g)),
                         cluster=c), timeline, (11, 3.8)),
    "accumulation K (nb 04)": (
        lambda c: k_slider(c, DEMO_CONFIG, value=4), (4, 5),
        lambda c, k: run(K_LIVE.replace(accum_steps=k), cluster=c), schedule, K_SIZE),
    "link Gb/s at K=4, classroom link (nb 04)": (
        lambda c: accumulation_link_slider(c, DEMO_CONFIG.replace(link="classroom"), k=4, value=1.0),
        (1.0, 2.0),
        lambda c, g: run(K_LINKED.replace(accum_steps=4, link=K_LINKED.link.with_gbps(g)), cluster=c),
        schedule, K_SIZE),
    "FSDP reshard_after_forward (nb 09b)": (
        lambda c: fsdp_live.fsdp_knobs(c, FSDP), (False, True),
        lambda c, v: fsdp_live.record_fsdp(FSDP_MOVE, cluster=c, reshard_after_forward=v, checks=False),
        lambda ax, r: plot_fsdp_step(r, ax=ax), FSDP_SIZE),
    "averaging H (nb 07)": (
        lambda c: period_slider(c, value=8), (8, 16),
        lambda c, h: compare_averaging(cluster=c, periods=(h,), steps=32),
        lambda ax, r: plot_drift(r, ax), (9, 3.2)),
}


@contextmanager
def whole_draws():
    """Every `Figure` draws its whole figure on a move, instead of restoring the kept frame and
    drawing what changed over it (limits and layout are still kept)."""
    kept = Figure._rasterize
    Figure._rasterize = lambda self: self.figure.canvas.draw()
    try:
        yield
    finally:
        Figure._rasterize = kept


def moves(panel, values, n: int) -> list[float]:
    slider = panel.children[0].children[0]
    times = []
    for i in range(n):
        target = values[(i + 1) % 2] if slider.value == values[0] else values[0]
        times.append(timed(lambda: setattr(slider, "value", target)))
    return times


def old_moves(cluster, old_run, draw, figsize, values, n: int) -> list[float]:
    return [timed(lambda: _old_figure(draw, figsize, old_run(cluster, values[i % 2]))) for i in range(n)]


def knob_table(cluster, n_moves: int, n_cold: int) -> None:
    rows = []
    for name, (build, values, old_run, draw, figsize) in WIDGETS.items():
        values = values(cluster) if callable(values) else values
        panel = build(cluster)          # the first run on this workload warms the ranks
        now, whole, before = [], [], []
        for _ in range(n_moves // 2):   # interleaved, so drifting load hits all alike
            now += moves(panel, values, 2)
            with whole_draws():
                whole += moves(panel, values, 2)
            before += old_moves(cluster, old_run, draw, figsize, values, 2)
        cold = []
        for _ in range(n_cold):
            def cold_cell():
                with Cluster(2) as fresh:
                    build(fresh)
            cold.append(timed(cold_cell))
        rows.append((name, statistics.median(before), statistics.median(whole), statistics.median(now),
                     min(now), max(now), statistics.median(cold)))
    print(f"\nknob → figure in the kernel, 2 warm gloo ranks, median of {n_moves} moves ({load()})")
    print("| widget | before (s) | drawn whole (s) | now (s) | now min–max (s) | cold re-run (s) | cold / now "
          "| before / now | whole / now |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, b, wh, n, lo, hi, c in rows:
        print(f"| {name} | {b:.3f} | {wh:.3f} | {n:.3f} | {lo:.2f}–{hi:.2f} | {c:.2f} | {c / n:.1f}x "
              f"| {b / n:.1f}x | {wh / n:.2f}x |")


@contextmanager
def clocked(marks: dict):
    """Time stamps of a move's steps, taken by wrapping what the widget calls: `Cluster.run_task`
    (and the ranks' results), `assemble_run`, and `Figure`'s steps. `marks` gets (start, end)
    per step and the results of the last task."""
    def wrap(owner, name, key):
        inner = getattr(owner, name)

        def timed_call(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                out = inner(*args, **kwargs)
            finally:
                marks[key] = (t0, time.perf_counter())
            if key == "task":
                marks["results"] = out
            if key == "show":
                marks["figure"] = args[0]
            return out
        setattr(owner, name, timed_call)
        return owner, name, inner

    kept = [wrap(_Cluster, "run_task", "task"), wrap(ddp_run, "assemble_run", "record"),
            wrap(fsdp_live, "assemble", "record"),
            *(wrap(Figure, step, step) for step in ("show", "redraw", "_plot", "_rasterize", "png"))]
    try:
        yield marks
    finally:
        for owner, name, inner in kept:
            setattr(owner, name, inner)


MOVE_ROWS = (
    ("kernel: slider.value set -> observer -> status line -> run()'s checks -> task sent", "set", "task0"),
    ("ranks: the slowest rank's own parts (setup, train, events, checks)", None, None),
    ("parent: task round trip beyond the slowest rank's parts (pipes, pickles, the other rank)", None, None),
    ("parent: record from the ranks' events (assemble_run)", "record0", "record1"),
    ("parent: record handed to the figure", "record1", "show0"),
    ("figure: empty the kept axes + plot calls at the kept limits (legend put back)", "_plot0", "_plot1"),
    ("figure: titles as the HTML caption", "_plot1", "_rasterize0"),
    ("figure: kept frame restored + what changed drawn over it", "_rasterize0", "_rasterize1"),
    ("figure: PNG encode", "png0", "png1"),
    ("figure: PNG bytes into the Image widget", "png1", "show1"),
    ("kernel: status line -> observer returns -> slider.value set returns", "show1", "end"),
)


def move_table(cluster, name: str, n: int) -> None:
    """One move of a widget as `moves` makes it, cut into consecutive intervals that together
    are the whole move: whatever a move spends, some row holds it (the parts table below
    times its parts apart, on its own calls)."""
    build, values = WIDGETS[name][:2]
    values = values(cluster) if callable(values) else values
    panel = build(cluster)
    moves(panel, values, 2)
    slider = panel.children[0].children[0]
    rows: dict[str, list[float]] = {label: [] for label, _, _ in MOVE_ROWS}
    totals, reused, grew = [], 0, 0
    with clocked({}) as marks:
        for _ in range(n):
            target = values[1] if slider.value == values[0] else values[0]
            kept_limits = marks["figure"].limits if "figure" in marks else None
            marks.clear()
            t_set = time.perf_counter()
            slider.value = target
            t_end = time.perf_counter()
            at = {"set": t_set, "end": t_end, **{f"{k}{i}": v[i] for k, v in marks.items()
                                                 if k not in ("results", "figure") for i in (0, 1)}}
            ranks = max(sum(r["parts_ms"].values()) for r in marks["results"])
            for label, start, stop in MOVE_ROWS:
                if start is not None:
                    rows[label].append((at[stop] - at[start]) * 1e3)
            rows[MOVE_ROWS[1][0]].append(ranks)
            rows[MOVE_ROWS[2][0]].append((at["task1"] - at["task0"]) * 1e3 - ranks)
            totals.append((t_end - t_set) * 1e3)
            reused += marks["figure"].reused_frame
            grew += kept_limits is not None and marks["figure"].limits != kept_limits
    med = {label: statistics.median(v) for label, v in rows.items()}
    print(f"\none {name} move as the widget makes it, cut into consecutive intervals, median of {n} "
          f"moves between {values[0]} and {values[1]}; the kept frame restored in {reused} of {n}, the kept "
          f"limits grown in {grew} (a plot drawn twice, its frame again) ({load()})")
    print("| interval | ms |")
    print("|---|---:|")
    for label, ms in med.items():
        print(f"| {label} | {ms:.1f} |")
    figure = sum(ms for label, ms in med.items() if label.startswith("figure"))
    parent = sum(ms for label, ms in med.items() if label.startswith(("parent", "kernel")))
    print(f"| figure + parent overhead (all but the ranks' own parts) | {figure + parent:.1f} |")
    print(f"| sum of the rows | {sum(med.values()):.1f} |")
    print(f"| **the move, timed whole** | **{statistics.median(totals):.1f}** |")


def parts_table(cluster, name: str, cfg, n: int) -> None:
    """One move of a DDP widget by parts: the run and record, then both figure paths."""
    draw, figsize = WIDGETS[name][3:]
    figure = Figure(draw, figsize, caption=True)   # as the re-run sliders draw it
    figure.show(run(cfg, cluster=cluster))   # the first value lays the figure out; moves keep it
    parts: dict[str, list[float]] = {}
    reused = 0

    def add(key, ms):
        parts.setdefault(key, []).append(ms)

    for i in range(n):   # (a seed not run before: a workload no rank keeps yet)
        bare = cluster.run_task(train_rank, cfg.replace(profile=False))
        add("ranks: train, bare DDP (no profiler)", max(r["parts_ms"]["train"] for r in bare))
        t0 = time.perf_counter()
        results = cluster.run_task(train_rank, cfg)
        t1 = time.perf_counter()
        record = assemble_run(cfg, results)
        t2 = time.perf_counter()
        slow = max(results, key=lambda r: sum(r["parts_ms"].values()))["parts_ms"]
        add("ranks: model + DDP construction (a new cap needs a new DDP)", slow["setup"])
        add("ranks: train under the profiler", slow["train"])
        add("ranks: profile -> the record's events, in memory", slow["events"])
        every = max(cluster.run_task(train_rank, cfg.replace(profile_from=0)),
                    key=lambda r: sum(r["parts_ms"].values()))["parts_ms"]
        add("before: train + events with every step profiled (profile_from=0)", every["train"] + every["events"])
        if cfg.warmup == "light":
            full_warmup = max(cluster.run_task(train_rank, cfg.replace(warmup="full")),
                              key=lambda r: sum(r["parts_ms"].values()))["parts_ms"]
            add("before: train with step 0 trained in full (warmup='full')", full_warmup["train"])
        fresh = max(cluster.run_task(train_rank, cfg.replace(seed=cfg.seed + 1 + i)),
                    key=lambda r: sum(r["parts_ms"].values()))["parts_ms"]
        add("before: model + DDP construction, the workload built and fingerprinted afresh", fresh["setup"])
        if cfg.warmup == "light":
            add("before: train with a light warm-up step first (a workload's first run, in which DDP "
                "rebuilds its buckets and the rank learns their ready order)", fresh["train"])
        add("ranks: equality checks (all_gather + cached reference)", slow["checks"])
        add("parent: task round trip beyond the slowest rank", (t1 - t0) * 1e3 - sum(slow.values()))
        add("parent: record from the ranks' events", (t2 - t1) * 1e3)
        full = cluster.run_task(train_rank, cfg, (), True)   # the old path, for comparison
        add("before: train with every op's shapes recorded (as a run writing a trace does)",
            max(r["parts_ms"]["train"] for r in full))
        add("old path, ranks: events + chrome JSON export (slowest rank)",
            max(r["parts_ms"]["events"] for r in full))
        t6 = time.perf_counter()
        for rank, res in enumerate(full):
            rank_spans(cfg, read_trace(res["trace_path"]), rank)
        add("old path, parent: chrome JSON read + parse (before the record)",
            (time.perf_counter() - t6) * 1e3)
        assemble_run(cfg, full)   # (removes the trace files)
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        t3 = time.perf_counter()
        draw(ax, record)
        t4 = time.perf_counter()
        fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")
        t5 = time.perf_counter()
        plt.close(fig)
        add("old figure: new pyplot figure + plot calls", (t4 - t3) * 1e3)
        add("old figure: tight bbox, two draws + PNG encode", (t5 - t4) * 1e3)
        t3 = time.perf_counter()
        figure._plot(record)
        figure.caption.value = caption_html(figure.axes)
        t4 = time.perf_counter()
        figure._rasterize()
        t5 = time.perf_counter()
        figure.png()
        t6 = time.perf_counter()
        reused += figure.reused_frame
        figure.figure.canvas.draw()   # the same figure drawn whole, as each move was before
        t7 = time.perf_counter()
        add("new figure: empty the kept axes + plot calls (kept layout, limits, legend) + titles as the "
            "HTML caption", (t4 - t3) * 1e3)
        add("new figure: kept frame restored + what changed drawn over it (kept glyphs)", (t5 - t4) * 1e3)
        add("new figure: PNG encode (RGB rows unfiltered, ISA-L deflate level 1)", (t6 - t5) * 1e3)
        add("kept figure before, for comparison: the same figure drawn whole (instead of the "
            "restore + what changed)", (t7 - t6) * 1e3)
    print(f"\none {name} move by parts ({cfg.layers}x{cfg.width} {cfg.model}, batch {cfg.batch_per_rank}"
          f"/rank, {cfg.steps} steps of {cfg.accum_steps} micro-steps, 2 ranks), median of {n}; "
          f"the kept frame restored in {reused} of {n} moves ({load()})")
    print("| part | ms |")
    print("|---|---:|")
    med = {key: statistics.median(values) for key, values in parts.items()}
    for key, ms in med.items():
        print(f"| {key} | {ms:.0f} |")
    common = sum(ms for key, ms in med.items() if key.startswith(("ranks: model", "ranks: train under",
                                                                 "ranks: equality", "parent")))
    total = lambda *prefixes: common + sum(ms for key, ms in med.items() if key.startswith(prefixes))
    print(f"| **old path: chrome JSON, new pyplot figure** | **{total('old'):.0f}** |")
    print(f"| **now: events in memory, figure redrawn in place** | "
          f"**{total('ranks: profile', 'new figure'):.0f}** |")

# 09b's knobs as the browser test moves them: (toggle's place in the panel, its two values)
FSDP_TOGGLES = {"prefetch": ((0, 1), (False, True)), "reshard_after_forward": ((0, 0), (False, True)),
                "units": ((1, 0), ("model", "block"))}


def fresh_fsdp_run(cluster):
    """09b's move as it ran before its ranks kept the sharded model: built, sharded and warmed
    up on every move (a seed no earlier run used: no rank keeps its model; the kept-model copy
    the rank then takes, a few ms, is in it)."""
    seeds = iter(range(FSDP.seed + 1000, FSDP.seed + 10**6))

    def run(knobs: FsdpKnobs, gbps: float):
        return fsdp_live.record_fsdp(FSDP_MOVE.replace(seed=next(seeds), link=FSDP.link.with_gbps(gbps)),
                                     cluster=cluster, reshard_after_forward=knobs.reshard_after_forward,
                                     prefetch=knobs.prefetch, units=knobs.units, checks=False)
    return run


def fsdp_table(cluster, n_moves: int) -> None:
    """09b's panel, each toggle moved there and back: now (a kept sharded model restored on the
    ranks) and before (built afresh each move), moves interleaved; then where a move's time
    goes, over all of now's moves (the ranks' parts from the slowest rank)."""
    now_panel = fsdp_live.fsdp_knobs(cluster, FSDP)
    before_panel = fsdp_panel(fresh_fsdp_run(cluster), FsdpKnobs(), (FSDP.link.gbps,), FSDP.link.gbps)
    rows, parts = [], {}
    with clocked({}) as marks:
        for knob, ((row, col), values) in FSDP_TOGGLES.items():
            times = {"now": [], "before": []}
            for i in range(n_moves):
                for arm, panel in (("now", now_panel), ("before", before_panel)):
                    toggle = panel.children[row].children[col]
                    marks.clear()
                    times[arm].append(timed(lambda: setattr(toggle, "value", values[i % 2])))
                    if arm == "now":
                        _fsdp_parts(parts, marks, times[arm][-1])
            rows.append((knob, *(statistics.median(times[a]) for a in ("before", "now")), min(times["now"]),
                         max(times["now"])))
    print(f"\n09b's FSDP knobs in the kernel, toggle set -> new PNG in the widget, 2 warm gloo ranks, "
          f"median of {n_moves} moves a knob ({load()})")
    print("| knob | before: built afresh (s) | now: kept model (s) | now min–max (s) | before / now |")
    print("|---|---:|---:|---:|---:|")
    for knob, before, now, lo, hi in rows:
        print(f"| {knob} | {before:.3f} | {now:.3f} | {lo:.2f}–{hi:.2f} | {before / now:.1f}x |")
    print(f"\none 09b move by parts, median of {len(parts['the move, timed whole'])} moves "
          f"({sum(parts['kept model reused'])} on a kept model) ({load()})")
    print("| part | ms |")
    print("|---|---:|")
    for key, values in parts.items():
        if key != "kept model reused":
            print(f"| {key} | {statistics.median(values):.1f} |")


def _fsdp_parts(parts: dict, marks: dict, seconds: float) -> None:
    """One 09b move's parts from `clocked`'s marks, added to `parts` (ms)."""
    results = marks["results"]
    slow = max(results, key=lambda r: sum(r["parts_ms"].values()))["parts_ms"]
    span = lambda key: (marks[key][1] - marks[key][0]) * 1e3
    named = {f"ranks: {name}": ms for name, ms in slow.items()}
    named["parent: task round trip beyond the slowest rank"] = span("task") - sum(slow.values())
    named["parent: record from the ranks' logs (assemble)"] = span("record")
    named["figure: plot calls at the kept limits"] = span("_plot")
    named["figure: kept frame restored + what changed drawn (or drawn whole)"] = span("_rasterize")
    named["figure: PNG encode"] = span("png")
    named["kernel: the rest (status and change lines, spread, observers)"] = (
        seconds * 1e3 - span("task") - span("record") - span("show"))
    named["the move, timed whole"] = seconds * 1e3
    named["kept model reused"] = all(r["reused"] for r in results)
    for key, value in named.items():
        parts.setdefault(key, []).append(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=8)
    parser.add_argument("--cold", type=int, default=2)
    parser.add_argument("--fsdp-only", action="store_true", help="only notebook 09b's knobs (fsdp_table)")
    args = parser.parse_args()
    n_parts = max(3, args.moves // 2)
    with Cluster(2) as cluster:
        fsdp_table(cluster, args.moves)
        move_table(cluster, "FSDP reshard_after_forward (nb 09b)", args.moves)
        if args.fsdp_only:
            return
        knob_table(cluster, args.moves, args.cold)
        for name in ("bucket_cap_mb (nb 03)", "bucket_cap_mb, sized link + alpha-beta outlines (nb 03's cell)",
                     "accumulation K (nb 04)"):
            move_table(cluster, name, args.moves)
        parts_table(cluster, "bucket_cap_mb (nb 03)", BUCKETS.replace(bucket_cap_mb=1.0), n_parts)
        parts_table(cluster, "bucket_cap_mb, GPT (nb 03, 15)", GPT_BUCKETS.replace(bucket_cap_mb=1.0), n_parts)
        parts_table(cluster, "accumulation K (nb 04)", K_LIVE.replace(accum_steps=4), n_parts)


if __name__ == "__main__":
    main()

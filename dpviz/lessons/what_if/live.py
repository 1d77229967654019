"""The live check: run the grid of world sizes, links, caps and accumulation on ranks over
the emulated link, and put each measured step beside the model's prediction of it, made
from one recorded step at another point of the grid (`dpviz.lessons.what_if.records`).

The emulated link (`dpviz.core.link`) charges what the model charges (α once per bucket, ring
bytes at β, one FIFO queue per rank), so the check measures the model, not the wire's
fidelity to some real NIC. Every target here is this machine on another emulated link, so
the predictions are asked for this machine's measured costs (`reduction=RECORDED`: gloo's
all-reduce on these cores, the hand-overs, and gloo under load: `measure_load`). torch is
imported inside the functions only, through `run` and the rank task.
"""
from __future__ import annotations

import itertools
import json
import os
from dataclasses import asdict
from pathlib import Path

from dpviz.core.config import RunConfig, require_int
from dpviz.core.link import Link, as_link
from dpviz.core.record import RecordError, RunRecord, load, read_json, save
from dpviz.lessons.what_if.learn import learn, measure
from dpviz.lessons.what_if.load import GlooLoad, load_from_rows
from dpviz.lessons.what_if.records import RECORDED, CheckRow, PredictionCheck, predict

FACADE = ("check_predictions",)

# The grid the benchmark runs: 6 MiB of MLP gradients (6 × Linear 512), slow enough links
# that communication shows beside this CPU's backward, caps from six buckets to one. The
# source point is DDP's default cap: its two bucket sizes (1 and 5 MiB) let the all-reduce's
# cost be split into a fixed and a per-byte part. It is recorded at the grid's largest K: a
# step with accumulation holds both kinds of micro-step, while from K = 1 the model has to
# take a micro-step that all-reduces nothing as long as the synchronising one's compute.
CHECK_CONFIG = RunConfig(layers=6, width=512, steps=6, checks=False)
CHECK_LINKS = (Link(1.0, 1000.0), Link(2.0, 500.0), Link(4.0, 250.0))
CHECK_CAPS = (None, 0.5, 25.0)   # None: DDP's default (1 MiB first bucket, then 25)


def link_label(link: Link) -> str:
    return f"{link.gbps:g} Gb/s, α {link.latency_us:g} µs"


def check_predictions(cfg: RunConfig | None = None, *, cluster=None, world_sizes=(2, 3, 4),
                      links=CHECK_LINKS, caps=CHECK_CAPS, accum_steps=(1, 4), repeats: int = 1,
                      cores: int | None = None, keep: str | os.PathLike | None = None) -> PredictionCheck:
    """Every point of world_sizes × links × caps × accum_steps run live on `cfg`'s workload,
    each beside a prediction from the grid's first link and cap at its largest K at the same
    world size, recorded right before it ("what-if"; on a shared machine the load drifts, so
    source and target run side by side, `repeats` times in turn: the row compares one
    prediction from the source runs pooled with the live runs pooled); the source runs are
    also replayed ("replay"), and the first set beside the later ones ("repeat": the
    machine's run-to-run noise). With
    `cores`, every world size but the first is also predicted from the first world size's
    source, compute scaled by core sharing ("cross-N"). A warm `cluster` serves the world
    size it has; the others get ranks of their own. On gloo, each world size's ranks also
    measure gloo under load (`measure_load`), a short round beside every grid point, pooled:
    every prediction at that size uses it.
    `keep`: a folder to save every run in (JSON records, those loads and the grid,
    `KEPT_GRID`), so that `recheck` can judge a changed model on the same runs, without this
    machine's run-to-run noise in the comparison."""
    from dpviz.engine.launch import using_cluster

    cfg = cfg or CHECK_CONFIG
    links = tuple(as_link(link) for link in links)
    if not world_sizes or not links or not caps or not accum_steps:
        raise ValueError("the check needs at least one world size, link, cap and accum_steps")
    if any(link is None for link in links):
        raise ValueError("the check runs on emulated links: give presets, Links or dicts, not 'off'")
    for n in world_sizes:
        require_int("world size", n, 2, 8)
    for k in accum_steps:
        require_int("accum_steps", k, 1, 64)
    require_int("repeats", repeats, 1, 20)
    for cap in caps:
        cfg.replace(bucket_cap_mb=cap)   # bad caps and configs fail here, before any rank
    folder = _keep_folder(keep)
    source = (links[0], caps[0], max(accum_steps))
    targets = [p for p in itertools.product(links, caps, accum_steps) if p != source]
    grid = {"workload": cfg.to_dict(), "cores": cores, "world_sizes": list(world_sizes),
            "links": [asdict(x) for x in links], "caps": list(caps), "accum_steps": list(accum_steps),
            "points": []}
    points, loads = [], {}
    for n in world_sizes:
        mine = cluster if cluster is not None and cluster.world_size == n else None
        with using_cluster(mine, n, cfg.backend, cfg.timeout_s) as ranks:
            load_rows: dict[int, list[list[dict[str, float]]]] = {}
            for link, cap, k in targets:
                if cfg.backend == "gloo":   # a round beside every point: the load's median spans the grid's time
                    load_rows = pool_rows(load_rows, measure_load_rows(ranks, repeats=LOAD_ROUND_REPEATS))
                sources, lives = [], []
                for _ in range(repeats):   # source, target, source, target, …
                    sources.append(run_live(cfg.replace(world_size=n, link=source[0], bucket_cap_mb=source[1],
                                                        accum_steps=source[2]), ranks))
                    lives.append(run_live(cfg.replace(world_size=n, link=link, bucket_cap_mb=cap,
                                                      accum_steps=k), ranks))
                target = cfg.replace(world_size=n, link=link, bucket_cap_mb=cap, accum_steps=k)
                points.append((target, sources, lives))
                if folder is not None:
                    grid["points"].append(_kept(folder, len(grid["points"]), target, sources, lives))
            if load_rows:
                loads[n] = load_from_rows(n, load_rows, LOAD_BURST)
                if folder is not None:
                    save(loads[n], folder / f"load-{n}.json")
    if folder is not None:
        (folder / KEPT_GRID).write_text(json.dumps(grid, indent=1) + "\n")
    return _check(points, cfg, world_sizes, links, caps, accum_steps, cores, loads)


# The grid file `check_predictions(keep=…)` writes beside the records it keeps.
KEPT_GRID = "grid.json"


def recheck(folder: str | os.PathLike, cores: int | None = None) -> PredictionCheck:
    """The check again on the runs `check_predictions(keep=folder)` saved: today's model
    against the same live steps and gloo loads, no rank started (an A/B of the model on
    identical runs; a world size kept without a load is predicted without one).
    `cores` as in the check; None: the kept check's own."""
    folder = Path(folder)
    path = folder / KEPT_GRID
    if not path.is_file():
        raise RecordError(f"{folder} holds no {KEPT_GRID}: keep runs with check_predictions(keep=...) "
                          "or benchmarks/predict_vs_live.py --keep FOLDER")
    grid = read_json(path)
    cfg = RunConfig.from_dict(grid["workload"])
    links = tuple(as_link(x) for x in grid["links"])
    points = [(RunConfig.from_dict(p["target"]), [load(folder / f, RunRecord) for f in p["sources"]],
               [load(folder / f, RunRecord) for f in p["lives"]]) for p in grid["points"]]
    loads = {n: load(folder / f"load-{n}.json", GlooLoad) for n in grid["world_sizes"]
             if (folder / f"load-{n}.json").is_file()}
    return _check(points, cfg, tuple(grid["world_sizes"]), links, tuple(grid["caps"]),
                  tuple(grid["accum_steps"]), grid["cores"] if cores is None else cores, loads)


def _keep_folder(keep) -> Path | None:
    """The folder to keep runs in, made now: a path that cannot be one fails before any rank."""
    if keep is None:
        return None
    folder = Path(keep)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"keep: cannot make folder {folder} ({err.strerror})") from None
    if (folder / KEPT_GRID).exists():
        raise ValueError(f"keep: {folder} already holds a kept check; give an empty folder")
    return folder


def _kept(folder: Path, index: int, target: RunConfig, sources: list[RunRecord],
          lives: list[RunRecord]) -> dict:
    """Save one grid point's runs; its entry in the grid file."""
    names = {"sources": [], "lives": []}
    for kind, runs in (("sources", sources), ("lives", lives)):
        for i, record in enumerate(runs):
            name = f"point{index:03d}-{kind}-{i}.json"
            save(record, folder / name)
            names[kind].append(name)
    return {"target": target.to_dict(), **names}


def _check(points, cfg: RunConfig, world_sizes, links, caps, accum_steps, cores,
           loads: dict[int, GlooLoad]) -> PredictionCheck:
    """The check's rows from each grid point's (target config, source runs, live runs)."""
    rows, first = [], None
    for target, sources, lives in points:
        n, link, cap, k = target.world_size, as_link(target.link), target.bucket_cap_mb, target.accum_steps
        learned = [learn(r, load=loads.get(n)) for r in sources]
        first = first or learned   # the first world size's source runs, for cross-N
        rows.append(_row("replay", sources[0].config, predict(learned, cores=cores), measure(sources), learned[0]))
        if len(sources) > 1:   # the noise floor: one run of the source "predicting" the next
            rows.append(_repeat_row(sources, learned[0]))
        rows.append(_row("what-if", target.to_dict(),
                         predict(learned, link=link, bucket_cap_mb=cap, accum_steps=k, reduction=RECORDED, cores=cores),
                         measure(lives), learned[0]))
        if cores is not None and first[0].world_size != n:
            cross = predict(first, world_size=n, link=link, bucket_cap_mb=cap, accum_steps=k, cores=cores,
                            reduction=RECORDED, load=loads.get(n))
            rows.append(_row("cross-N", target.to_dict(), cross, measure(lives), first[0]))
    return PredictionCheck({"source": "live + model", "workload": cfg.to_dict(), "cores": cores,
                            "world_sizes": list(world_sizes), "links": [link_label(x) for x in links],
                            "caps": list(caps), "accum_steps": list(accum_steps),
                            "gloo_under_load": {str(n): x.describe() for n, x in sorted(loads.items())}},
                           tuple(rows))


# The sizes gloo's load is measured at: the grid's buckets run from half a MiB to all 6 MiB.
LOAD_SIZES = (1 << 19, 1 << 20, 6 << 20)
LOAD_BURST = 60      # 128×128 matmuls: a burst of a few ms, as long as a few layers' backward
LOAD_REPEATS = 15
# The check measures a round of this many repeats beside each grid point and pools them: a
# measurement's rates move by up to 4× between measurements seconds apart (benchmarks/README.md,
# "gloo under load"), and the live runs they predict are spread over the whole grid.
LOAD_ROUND_REPEATS = 6


def measure_load(ranks, sizes=LOAD_SIZES, burst: int = LOAD_BURST, repeats: int = LOAD_REPEATS) -> GlooLoad:
    """This machine's gloo under load on `ranks` (a warm cluster): per size, an all-reduce alone,
    two at once and beside a compute burst (`all_reduce_under_load_rank`)."""
    return load_from_rows(ranks.world_size, measure_load_rows(ranks, sizes, burst, repeats), burst)


def measure_load_rows(ranks, sizes=LOAD_SIZES, burst: int = LOAD_BURST,
                      repeats: int = LOAD_REPEATS) -> dict[int, list[list[dict[str, float]]]]:
    """The rank task's rows behind `measure_load`: per size, per rank, per repeat."""
    from dpviz.lessons.collectives.timing import all_reduce_under_load_rank

    return {size: ranks.run_task(all_reduce_under_load_rank, size // 4, burst, repeats) for size in sizes}


def pool_rows(a: dict[int, list[list[dict]]], b: dict[int, list[list[dict]]]) -> dict[int, list[list[dict]]]:
    """Two measurements' rows as one: each rank's repeats of each size, `a`'s then `b`'s."""
    return {size: [mine + theirs for mine, theirs in zip(a[size], b[size])] if size in a else b[size]
            for size in b}


def run_live(cfg: RunConfig, ranks) -> RunRecord:
    from dpviz.engine.ddp_run import run

    return run(cfg, cluster=ranks)


def _repeat_row(sources: list[RunRecord], learned) -> CheckRow:
    """The source's first run beside its later runs: no model, only how much one setting's
    step moves between runs minutes apart on this machine (what any prediction is judged
    through)."""
    first, later = measure(sources[0]), measure(sources[1:])
    return CheckRow("repeat", learned.world_size, link_label(learned.link), learned.bucket_cap_mb,
                    learned.accum_steps, "its own earlier run", first.step_ms, later.step_ms,
                    later.step_ms_quartiles, first.exposed_comm_ms, later.exposed_comm_ms)


def _row(check: str, config: dict, predicted, live, learned) -> CheckRow:
    """A row: the prediction (from the source runs pooled) beside the pooled live steps."""
    cap = learned.bucket_cap_mb
    source = (f"N={learned.world_size} {link_label(learned.link)} cap {'default' if cap is None else f'{cap:g}'} "
              f"K={learned.accum_steps}")
    return CheckRow(check, config["world_size"], link_label(as_link(config["link"])), config["bucket_cap_mb"],
                    config["accum_steps"], source, predicted.step_ms, live.step_ms,
                    live.step_ms_quartiles, predicted.exposed_comm_ms,
                    live.exposed_comm_ms, predicted.config["compute_scale"])

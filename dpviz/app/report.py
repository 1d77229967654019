"""One self-contained HTML page for a run or a set of traces: nothing to serve, nothing
fetched — every figure is inline (base64 PNG), every number comes from the record.

Sections: every rank's timeline on the common clock, the per-step table (summary.json's
rows), both overlap figures, HTA's temporal breakdown, the collectives by op and size
(DDP's buckets), and the cross-rank analysis (arrival skew, waiting, stragglers).
"""
from __future__ import annotations

import base64
import html
import io
import os
from pathlib import Path

from dpviz.analysis.overlap import compute_definition, record_ranks, steady_steps
from dpviz.analysis.scan import COMM_KINDS
from dpviz.analysis.stragglers import match_collectives, straggler_ranking
from dpviz.analysis.summary import summary
from dpviz.core.record import RunRecord
from dpviz.plots.style import figures_for_files


def rank_labels(record: RunRecord) -> dict[int, str]:
    """'node:local (rank R)' per rank when the record knows its nodes, else 'rank R'."""
    return {r: record.rank_labels.get(r, f"rank {r}") for r in record_ranks(record)}


def render_report(record: RunRecord, title: str = "dpviz report") -> str:
    """The page as one HTML string; its figures are made for the page only (a notebook that
    renders a report shows none of them, and its plotting backend stays as it was)."""
    with figures_for_files():
        body = _body(record, title)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>{body}</body></html>")


def _body(record: RunRecord, title: str) -> str:
    from dpviz.plots.timeline import plot_timeline
    from dpviz.lessons.traces.plots import allreduce_sizes, plot_allreduce_sizes, sizes_unknown

    data, labels = summary(record), rank_labels(record)
    step = steady_steps(record)[-1]
    live = record.config.get("source") != "trace"
    parts = [f"<h1>{_e(title)}</h1>",
             f"<p>{'Live run' if live else 'Loaded traces'}: {record.world_size} ranks in the job, "
             f"{len(labels)} shown ({', '.join(labels.values())}); steps {_e(record.steps)}; "
             f"{_e(data['analysed_steps_rule'])}. Figures below are drawn from this record, "
             f"{'measured live' if live else 'as the traces recorded them'}; "
             f"{_e(compute_definition(record))}.</p>",
             _notes(record),
             "<h2>Every rank's timeline (common clock)</h2>",
             _figure(plot_timeline(record, step=step, labels=labels),
                     f"timeline of step {step}, the last analysed step")]
    rows = allreduce_sizes(record, step=step) if any(
        s.kind in COMM_KINDS for s in record.spans_of(step=step)) else []
    if rows:
        unknown = sizes_unknown(rows)
        parts += ["<h2>Collectives by op and size (DDP's all-reduces are its buckets)</h2>",
                  f"<p>{_e(unknown)}</p>" if unknown else
                  _figure(plot_allreduce_sizes(record, step=step), f"collectives of step {step}"),
                  _buckets_table(record, step)]
    parts += ["<h2>Per step</h2>",
              f"<p>The overlap column: {_e(data['definitions']['rows'])}.</p>",
              _rows_table(data["rows"], labels, data["dropped_steps"]),
              "<h2>Overlap and temporal breakdown</h2>",
              "<p>Per rank over a whole window, each by the definition its row names (the "
              "overlap is |communication ∩ compute| / |communication|; n/a: no communication "
              "to overlap):</p>", _definitions(data, ("HTA", "dpviz")),
              _breakdown_table(data, labels), _hta_differences(data),
              "<h2>Across ranks: skew, waiting and stragglers</h2>", _stragglers(record, labels, step)]
    return "\n".join(parts)


def write_report(record: RunRecord, path: str | os.PathLike, title: str = "dpviz report") -> Path:
    path = Path(path)
    page = render_report(record, title)   # all of it first: a failure writes nothing
    part = path.with_name(f".{path.name}.part")
    part.write_text(page, encoding="utf-8")
    os.replace(part, path)
    return path


_CSS = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;font-size:13px;margin:.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "th{background:#f3f3f3}img{max-width:100%}figcaption{color:#666;font-size:12px}"
        ".wide{overflow-x:auto;max-width:100%}h1{overflow-wrap:anywhere}td:first-child{white-space:nowrap}")


def _e(text) -> str:
    return html.escape(str(text))


def _figure(ax, caption: str) -> str:
    buf = io.BytesIO()
    ax.figure.savefig(buf, format="png", dpi=100)
    src = base64.b64encode(buf.getvalue()).decode("ascii")
    return (f"<figure><img alt='{_e(caption)}' src='data:image/png;base64,{src}'>"
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"   # scrolls, not the page


def _hta_differences(data: dict) -> str:
    """Where HTA's reading of these traces and dpviz's own figures differ, and why."""
    if not data["hta_differences"]:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in data["hta_differences"])
    return f"<p>Where HTA's reading and dpviz's own figures differ here, and why:</p><ul>{items}</ul>"


def _notes(record: RunRecord) -> str:
    if not record.notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in record.notes)
    return f"<details><summary>What was read and inferred ({len(record.notes)} notes)</summary><ul>{items}</ul></details>"


def _rows_table(rows: list[dict], labels: dict[int, str], dropped: list[dict]) -> str:
    ops = sorted({op for r in rows for op in r["comm_ms_by_op"]})
    why = {d["step"]: d["why"] for d in dropped}
    header = ["rank", "step", "step ms", "compute ms", "comm ms", "overlap", "with backward",
              "idle ms"] + [f"{op} ms" for op in ops] + ["analysed"]
    share = lambda r, key: "n/a" if r[key] is None else f"{r[key]:.2f}"
    return _table(header, [[labels.get(r["rank"], r["rank"]), r["step"], f"{r['step_ms']:.2f}",
                            f"{r['compute_ms']:.2f}", f"{r['comm_ms']:.2f}",
                            share(r, "overlap_fraction"), share(r, "backward_overlap_fraction"),
                            f"{r['idle_ms']:.2f}"]
                           + [f"{r['comm_ms_by_op'].get(op, 0.0):.2f}" for op in ops]
                           + [f"no: {why[r['step']]}" if r["step"] in why else "yes"] for r in rows])


def _buckets_table(record: RunRecord, step: int) -> str:
    """The buckets DDP handed the comm hook (live runs only: a trace has no comm hook)."""
    rank = record_ranks(record)[0]
    mine = sorted((b for b in record.buckets if b.rank == rank and b.step == step),
                  key=lambda b: (b.micro_step, b.index))
    if not mine:
        return ""
    return (f"<p>Buckets as DDP's comm hook saw them (rank {rank}, step {step}):</p>"
            + _table(["micro-step", "bucket", "MiB", "parameters", "first … last"],
                     [[b.micro_step, b.index, f"{b.bytes / 2**20:.2f}", len(b.params),
                       f"{b.params[0]} … {b.params[-1]}" if b.params else ""] for b in mine]))


def _definitions(data: dict, names: tuple[str, ...]) -> str:
    """The definitions the page's rows name, those used only."""
    used = {o["definition"] for o in data["overlap"]} | {b["definition"] for b in data["breakdown"]}
    items = "".join(f"<li><b>{_e(n)}</b>: {_e(data['definitions'][n])}</li>" for n in names if n in used)
    return f"<ul>{items}</ul>" if items else ""


def _breakdown_table(data: dict, labels: dict[int, str]) -> str:
    overlap = {o["rank"]: o for o in data["overlap"]}
    breakdown = {b["rank"]: b for b in data["breakdown"]}
    rows = []
    for rank in sorted(overlap):
        o, b = overlap[rank]["overlap_fraction"], breakdown.get(rank)
        rows.append([labels.get(rank, rank), "n/a" if o is None else f"{100 * o:.2f}",
                     overlap[rank]["definition"]]
                    + ([f"{b['window_ms']:.2f}", b["idle_pct"], b["compute_pct"],
                        b["non_compute_pct"], b["definition"]] if b else ["n/a"] * 5))
    return _table(["rank", "overlap %", "by", "window ms", "idle %", "compute %", "non-compute %",
                   "by"], rows)


def _stragglers(record: RunRecord, labels: dict[int, str], step: int) -> str:
    if len(labels) < 2:
        return "<p>One rank only: load every rank's trace to compare them.</p>"
    ranking, (instances, unmatched) = straggler_ranking(record), match_collectives(record)
    ranks = sorted(labels)
    out = [_table(["step", "straggler", "ranking (latest first)"]
                  + [f"{labels[r]} waited ms" for r in ranks],
                  [[s.step, labels[s.straggler], ", ".join(labels[r] for r in s.ranking)]
                   + [f"{s.waited_ms[r]:.2f}" for r in ranks] for s in ranking])]
    shown = [c for c in instances if c.step == step]
    how = " and ".join(sorted({c.matched_by for c in shown}))
    out.append(f"<p>The {len(shown)} matched collectives of step {step}"
               + (f", matched per communicator by {how}" if how else "")
               + " (every step's are in summary.json):</p>")
    out.append(_table(["step", "#", "op", "MiB", "skew ms", "last to arrive"]
                      + [f"{labels[r]} waits / moves ms" for r in ranks],
                      [[c.step, c.index, c.op, "" if c.bytes is None else f"{c.bytes / 2**20:.2f}",
                        f"{c.skew_ms:.2f}", labels[c.last_rank]]
                       + [f"{c.wait_ms[r]:.2f} / {c.move_ms[r]:.2f}" for r in ranks]
                       for c in shown]))
    if unmatched:
        out.append(f"<p>{sum(u.count for u in unmatched)} collectives ran on one loaded rank with no "
                   "loaded peer running the same op at the same time (their peers' traces are not "
                   "loaded, or the instance fell outside the profiled window): unmatched, so no wait "
                   "is computed for them.</p>"
                   + _table(["step", "rank", "op", "communicator", "count"],
                            [[u.step, labels.get(u.rank, u.rank), u.op, u.group or "", u.count]
                             for u in unmatched]))
    return "\n".join(out)

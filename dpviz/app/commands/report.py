"""`dpviz report DIR|TRACE... --out report.html`: one offline HTML page for a run or traces."""
from __future__ import annotations

from pathlib import Path

from dpviz.analysis.trace_files import load_trace
from dpviz.app.report import write_report
from dpviz.core.arguments import comma_list
from dpviz.core.record import RunRecord, load

NAME = "report"
HELP = "one self-contained HTML page (figures inline) for a dpviz run folder or per-rank traces"


def add_arguments(p) -> None:
    p.add_argument("inputs", nargs="+", metavar="DIR|TRACE",
                   help="a folder written by `dpviz run`/`load-trace` (its record.json), a folder "
                        "of per-rank traces, or the trace files themselves")
    p.add_argument("--ranks", type=comma_list(int), help="rank of each trace file, in order, for "
                   "traces without distributedInfo")
    p.add_argument("--out", required=True, help="the HTML file to write")


def read_inputs(inputs: list[str], ranks=None) -> RunRecord:
    """A folder's record.json, else the traces in it or given."""
    paths = [Path(p) for p in inputs]
    if len(paths) == 1 and (paths[0] / "record.json").is_file():
        return load(paths[0] / "record.json", expect=RunRecord)
    return load_trace(paths, ranks=ranks)


def main(args) -> int:
    out = Path(args.out)
    if not out.parent.is_dir():
        raise ValueError(f"cannot write {out}: folder {out.parent} does not exist")
    record = read_inputs(args.inputs, args.ranks)
    write_report(record, out, title=f"dpviz report: {_what(args.inputs)}")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, self-contained)")
    return 0


def _what(inputs: list[str]) -> str:
    """The page's title: a few inputs by name, many by count and folder."""
    if len(inputs) <= 2:
        return ", ".join(inputs)
    folders = {str(Path(p).parent) for p in inputs}
    return f"{len(inputs)} traces in {folders.pop()}" if len(folders) == 1 else f"{len(inputs)} traces"

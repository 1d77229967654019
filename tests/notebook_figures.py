"""The kernel side of tests/test_notebook_legibility.py (never imported by dpviz).

`python tests/notebook_figures.py DIR` writes an IPython profile, DIR/ipython, whose startup file
hooks every kernel started with IPYTHONDIR=DIR/ipython — nbval's included, since its kernels
inherit the environment — so the notebooks are checked on the one run that tests them, unedited.
In a hooked kernel every matplotlib Figure made while a cell runs — pyplot's and the widgets'
own — is checked after the cell with dpviz.plots.legibility, and the kernel's own log,
DIR/kernel-<pid>-<random>.jsonl, gets one JSON line per figure (its titles and every label, overlapping labels
with tick labels included, labels on bars they cannot be read on, type under 7 pt, titles naming
fewer models than drawn, the smallest type as shown, the labels `place_labels` hid), one per
write to stderr or stdout (tests/test_notebook_jargon.py reads what was printed), and one per cell
that ran. The kernel is not told which notebook it runs, so
each line names its cell by a fingerprint of the cell's source: the test finds the notebook
whose code cells that kernel ran, in order."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from pathlib import Path

# Loads this file in its own namespace, so a notebook sees none of the hook's names (a learner's
# copy has no `json` or `os` it forgot to import).
STARTUP = """\
def _dpviz_figure_hook():
    import importlib.util
    spec = importlib.util.spec_from_file_location("dpviz_notebook_figures", {hook!r})
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.hook({log_dir!r})
_dpviz_figure_hook()
del _dpviz_figure_hook
"""

_made: list = []
_cell = {"fingerprint": ""}   # the cell running, or the last one that ran


def fingerprint(source: str) -> str:
    """What names a cell in the log: the kernel and the test both see its exact source."""
    return hashlib.sha1(source.encode()).hexdigest()


def install(log_dir: Path) -> Path:
    """Write the profile that hooks kernels to log into `log_dir`, dropping the kernel logs of
    an earlier run there (a stale log must not stand in for this one); return its IPYTHONDIR."""
    log_dir = log_dir.resolve()   # kernels start in the notebook's folder
    startup = log_dir / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("kernel-*.jsonl"):
        old.unlink()
    text = STARTUP.format(hook=str(Path(__file__).resolve()), log_dir=str(log_dir))
    (startup / "00-dpviz-figures.py").write_text(text)
    return log_dir / "ipython"


def hook(log_dir: str) -> None:
    """In the kernel: remember every Figure made, note each cell as it starts, check its figures
    after it, and log every write to stderr (ipykernel's stream, which also carries what the
    kernel's child processes write to file descriptor 2)."""
    import matplotlib.figure
    from IPython import get_ipython

    # a pid may recur within one run
    log = os.path.join(log_dir, f"kernel-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl")
    init = matplotlib.figure.Figure.__init__

    def remember(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _made.append(self)

    def write_stderr(text, write=sys.stderr.write):
        if text:
            _append(log, {"kind": "stderr", "cell": _cell["fingerprint"], "text": text[:300]})
        return write(text)

    def write_stdout(text, write=sys.stdout.write):   # what a learner reads: the jargon test's input
        if text:
            _append(log, {"kind": "stdout", "cell": _cell["fingerprint"], "text": text[:4000]})
        return write(text)

    matplotlib.figure.Figure.__init__ = remember
    sys.stderr.write = write_stderr   # an instance attribute: ipykernel's fd watcher calls it too
    sys.stdout.write = write_stdout
    events = get_ipython().events
    events.register("pre_run_cell", _started)
    events.register("post_run_cell", lambda result: _ran(log, result))


def _append(log: str, line: dict) -> None:
    with open(log, "a") as f:
        f.write(json.dumps(line) + "\n")


def _started(info) -> None:
    if info.raw_cell.strip():
        _cell["fingerprint"] = fingerprint(info.raw_cell)


def _ran(log: str, result) -> None:
    if not result.info.raw_cell.strip():   # nbclient never sends a blank cell; nbval does
        return
    cell = fingerprint(result.info.raw_cell)
    for fig in _made:
        if fig.axes:
            _append(log, {"kind": "figure", "cell": cell, **_measure(fig)})
    _made.clear()
    _append(log, {"kind": "ran", "cell": cell})


# issue 42 item 12's kinds, logged for every figure: a legend over bars or across its axes'
# edge, fractional ticks on whole numbers, a bar drawn over another's end, a label far from its
# bar, a stamp or legend entry naming what is not drawn (tests/test_notebook_legibility.py fails on each)
ITEM_12_KINDS = ("legend_over_bars", "legend_across_axes", "fractional_ticks", "overdrawn_bars",
                 "floating_labels", "names_not_drawn")


def _measure(fig) -> dict:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dpviz.plots.legibility import (
        floating_labels, fractional_ticks, hidden_texts, legends_across_axes, legends_over_bars,
        names_not_drawn, overdrawn_bars, overlapping_texts, shown_sizes, small_texts, texts_over_bars,
        title_missing_models,
    )
    try:
        if not hasattr(fig.canvas, "get_renderer"):   # closed by pyplot after it was shown
            FigureCanvasAgg(fig)
        line = {"titles": _titles(fig), "texts": _texts(fig), "overlaps": overlapping_texts(fig),
                "hidden": hidden_texts(fig), "over_bars": texts_over_bars(fig),
                "small": small_texts(fig), "titles_missing": title_missing_models(fig),
                "smallest_pt": min((round(pt, 1) for _, pt in shown_sizes(fig)), default=None),
                "legend_over_bars": legends_over_bars(fig), "legend_across_axes": legends_across_axes(fig),
                "fractional_ticks": fractional_ticks(fig), "overdrawn_bars": overdrawn_bars(fig),
                "floating_labels": floating_labels(fig), "names_not_drawn": names_not_drawn(fig)}
        bad = any(line[name] for name in ("overlaps", "over_bars", "small", "titles_missing", *ITEM_12_KINDS))
        if bad and os.environ.get("DPVIZ_FIGURE_DIR"):   # to look at
            fig.savefig(os.path.join(os.environ["DPVIZ_FIGURE_DIR"], f"{id(fig)}.png"))
    except Exception as err:   # reported by the test, not lost in the kernel
        return {"error": repr(err)}
    return line


def _texts(fig) -> list[str]:
    """Every visible label of the figure (titles, axis and tick labels, legends, annotations):
    the words a learner reads in it."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _titles(fig) -> list[str]:
    return [t for ax in fig.axes for t in (ax.get_title(loc="left"), ax.get_title()) if t][:2]


if __name__ == "__main__":
    print(install(Path(sys.argv[1])))

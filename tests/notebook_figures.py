"""Run inside a notebook's kernel by tests/test_notebook_legibility.py (never imported by dpviz):
every matplotlib Figure made while a cell runs — pyplot's and the widgets' own — is checked
after the cell with dpviz.plots.legibility, and one JSON line per figure is appended to the
log named by DPVIZ_FIGURE_LOG: the cell, the figure's titles, overlapping labels (tick labels
included), labels on bars they cannot be read on, type under 7 pt, titles naming fewer models
than drawn, the smallest type as shown, and the labels `place_labels` hid."""
import json
import os

import matplotlib.figure

_made = []
_init = matplotlib.figure.Figure.__init__


def _remember(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    _made.append(self)


def _titles(fig):
    return [t for ax in fig.axes for t in (ax.get_title(loc="left"), ax.get_title()) if t][:2]


def _check(result):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dpviz.plots.legibility import (hidden_texts, overlapping_texts, shown_sizes, small_texts,
                                        texts_over_bars, title_missing_models)

    cell = result.info.raw_cell.strip().splitlines()[0][:80] if result.info.raw_cell.strip() else ""
    with open(os.environ["DPVIZ_FIGURE_LOG"], "a") as log:
        for fig in _made:
            if not fig.axes:
                continue
            try:
                if not hasattr(fig.canvas, "get_renderer"):   # closed by pyplot after it was shown
                    FigureCanvasAgg(fig)
                line = {"cell": cell, "titles": _titles(fig), "overlaps": overlapping_texts(fig),
                        "hidden": hidden_texts(fig), "over_bars": texts_over_bars(fig),
                        "small": small_texts(fig), "titles_missing": title_missing_models(fig),
                        "smallest_pt": min((round(pt, 1) for _, pt in shown_sizes(fig)), default=None)}
                bad = line["overlaps"] or line["over_bars"] or line["small"] or line["titles_missing"]
                if bad and os.environ.get("DPVIZ_FIGURE_DIR"):   # to look at
                    fig.savefig(os.path.join(os.environ["DPVIZ_FIGURE_DIR"], f"{id(fig)}.png"))
            except Exception as err:   # reported by the test, not lost in the kernel
                line = {"cell": cell, "error": repr(err)}
            log.write(json.dumps(line) + "\n")
    _made.clear()


matplotlib.figure.Figure.__init__ = _remember
get_ipython().events.register("post_run_cell", _check)  # noqa: F821 (IPython's global)

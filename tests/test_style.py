"""Every figure says where its data comes from: live, loaded trace, quoted or model."""
import ast
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from dpviz.plots import style  # noqa: E402
from dpviz.core.record import RunRecord, Span  # noqa: E402

PLOTS = Path(style.__file__).parent


def test_every_plot_function_tags_its_figure():
    """A plot_* function stamps its source (style.tag) or draws through one that does."""
    untagged = []
    for path in sorted(PLOTS.glob("*.py")):
        for fn in ast.parse(path.read_text()).body:
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("plot_"):
                calls = {c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
                         for c in ast.walk(fn) if isinstance(c, ast.Call)}
                if "tag" not in calls and not any(c.startswith("plot_") for c in calls):
                    untagged.append(f"{path.name}:{fn.name}")
    assert untagged == []


def _record(config, kinds=()):
    spans = tuple(Span(rank=0, kind=k, name=k, start_us=0.0, end_us=1.0, tid="0") for k in kinds)
    return RunRecord(config=config, world_size=1, spans=spans, buckets=(), micro_steps=(),
                     losses={}, checks=(), ddp_logging={}, notes=())


def test_source_and_adjustment_come_from_the_record():
    assert style.source_of(_record({"source": "trace"})) == "loaded trace"
    assert style.source_of(_record({"world_size": 2})) == "live"
    # said only where an all-reduce's end was moved onto its micro-step's end (issue 30: the
    # badge stood on every figure with micro-steps, capped or not)
    capped = _record({}, ["micro_step", "allreduce"])
    assert style.adjustment_of(capped, micro_steps_drawn=True) == "all-reduce ends capped at their micro-step"
    # a figure that draws no micro-steps names what it does draw (issue 42 item 12: 15's timeline)
    assert style.adjustment_of(capped) == "all-reduce ends capped at backward()'s return"
    assert style.adjustment_of(_record({}, ["micro_step"])) == ""
    inside = RunRecord(config={}, world_size=1, buckets=(), micro_steps=(), losses={}, checks=(),
                       ddp_logging={}, notes=(),
                       spans=(Span(rank=0, kind="micro_step", name="m", start_us=0.0, end_us=9.0, tid="0"),
                              Span(rank=0, kind="allreduce", name="a", start_us=2.0, end_us=5.0, tid="g")))
    assert style.adjustment_of(inside) == ""
    assert style.adjustment_of(_record({}, ["forward"])) == ""


def test_tag_writes_one_stamp_and_rejects_unknown_sources():
    _, ax = plt.subplots()
    style.tag(ax, "live", "model", "live", note="capped")
    assert style.tags_of(ax) == ["live + model · capped"]
    with pytest.raises(ValueError, match="sources must be"):
        style.tag(ax, "measured")
    plt.close("all")


def test_a_figure_drawn_while_a_site_records_says_in_its_stamp_that_its_run_was_recorded(monkeypatch):
    """The page shows it long after the run, and a saved PNG travels without the page's tag:
    "live" alone would claim a run of the reader's. The other sources stay what they are."""
    monkeypatch.setenv(style.RECORDING_ENV, "recorded at build time on a test machine, 2026-01-01")
    _, ax = plt.subplots()
    style.tag(ax, "live", "model", note="capped")
    style.tag(ax, "loaded trace")
    style.tag(ax, "model")
    assert style.tags_of(ax) == ["live, recorded at build time + model · capped", "loaded trace", "model"]
    assert style.tags_of(ax)[0].startswith(style.SOURCES[0])   # still says which source it is
    plt.close("all")


def test_zero_stages_figure_is_a_model():
    from dpviz.lessons.zero.plots import plot_zero_stages

    assert style.tags_of(plot_zero_stages(7.5e9, 64)) == ["model"]
    plt.close("all")


def _gloo_2rank() -> RunRecord:
    from dpviz.analysis.trace_files import load_trace

    return load_trace([Path(__file__).parent / "data" / "dpviz-gloo-2rank"])   # a folder of traces


def _pixels(fig) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return Image.open(buf).convert("RGB").tobytes()


def test_figures_for_files_match_pyplot_figures_and_pyplot_never_holds_them():
    """load-trace and the report page draw their figures this way: no pyplot import, nothing
    for a notebook to show; the same plotting code must give the same pixels."""
    from dpviz.plots.timeline import plot_timeline

    record, held = _gloo_2rank(), plt.get_fignums()
    step = record.steps[-1]
    with style.figures_for_files():
        for_files = plot_timeline(record, step=step).figure
    assert plt.get_fignums() == held   # pyplot neither holds nor shows it
    shown = plot_timeline(record, step=step).figure
    assert plt.get_fignums() == [*held, shown.number]
    assert _pixels(for_files) == _pixels(shown)   # same code, same renderer: exact
    plt.close(shown)


def test_rendering_a_report_leaves_the_notebooks_backend_and_figures_as_they_were():
    from dpviz.app.report import render_report

    record, backend, held = _gloo_2rank(), matplotlib.get_backend(), plt.get_fignums()
    matplotlib.use("svg")   # any backend but the Agg the report draws with
    try:
        assert render_report(record).count("data:image/png") == 2
        assert matplotlib.get_backend() == "svg" and plt.get_fignums() == held
    finally:
        matplotlib.use(backend)

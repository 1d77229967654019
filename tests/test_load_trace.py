"""Loading traces of jobs dpviz did not run: facts read from two real traces, and every way
a trace file can be odd or broken (fuzzed with hypothesis) → a record or a clear TraceError.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpviz.analysis import trace_files as trace_files
from dpviz.analysis.overlap import describe, summarize_step
from dpviz.analysis.scan import TraceError
from dpviz.analysis.trace_files import load_trace, stream_events
from dpviz.app.cli import main as cli
from dpviz.app.figure_process import can_fork
from dpviz.core.record import RunRecord, load, save
from dpviz.lessons.traces.plots import allreduce_sizes, plot_allreduce_sizes
from dpviz.plots.timeline import plot_timeline

DATA = Path(__file__).parent / "data"
A100 = DATA / "a100-nccl-ddp-rank0.json.gz"
GLOO34 = DATA / "cpu-gloo-rank34.json.gz"
DPVIZ = [DATA / f"dpviz-gloo-2rank/rank-{r}.json.gz" for r in (0, 1)]


@pytest.fixture(scope="module")
def a100() -> RunRecord:
    return load_trace(A100)


def _trace(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# --- the A100 NCCL trace --------------------------------------------------------------------

def test_a100_trace_loads_as_rank_0_of_a_two_rank_nccl_job(a100):
    assert a100.world_size == 2 and a100.steps == [4, 5, 6]
    config = dict(a100.config)
    # where the common clock's 0 is on the trace's own clock: ProfilerStep#4's ts, as written
    assert config.pop("clock_origin_us") == 4458676416788.066
    # HTA 0.5.0's figures, as HTA computes them from the events (tests/data/nccl-a100-ddp/hta-0.5.0.json)
    hta = config.pop("hta")["0"]
    assert (hta["window_us"], round(100 * hta["overlap"], 2)) == (435586.0, 14.31)
    assert [round(100 * hta[k] / hta["window_us"], 2) for k in ("idle_us", "compute_us", "non_compute_us")] \
        == [77.78, 17.26, 4.97]
    assert config == {"source": "trace", "paths": [str(A100)], "backend": "nccl",
                           "world_size": 2, "ranks": [0]}
    assert not (a100.buckets or a100.checks or a100.ddp_logging or a100.losses)
    notes = "\n".join(a100.notes)
    assert "rank 0 (from distributedInfo)" in notes and "loaded 1 of 2 ranks" in notes
    assert "communication kernels on stream 40, compute kernels on stream 7" in notes
    # the common clock starts at the first step
    assert min(s.start_us for s in a100.spans if s.kind == "step") == 0.0


def test_a100_overlap_is_measured_on_the_gpu_timeline(a100):
    """Checked by hand once (per all-reduce kernel of ProfilerStep#5, the time stream 7 ran
    backward kernels during it): buckets 0-4 ran 2.52, 2.67, 2.62, 2.42, 2.03 ms = 12.26 ms, with
    0.37, 0.40, 0.65, 0.34, 0.00 ms of backward kernels under them = 1.76 ms → 0.144. It is low
    because this GPU idles most of the step: backward's kernels keep it busy 25 ms out of the
    83 ms between the first and the last, and the last bucket runs after backward ends.
    Communication also counts the step's two NCCL broadcasts (DDP's buffers, 0.04 ms)."""
    s = summarize_step(list(a100.spans), rank=0, step=5)
    assert s.n_allreduces == 5 and s.n_collectives == 7
    assert s.comm_ms_by_op["all_reduce"] == pytest.approx(12.26, abs=0.01)
    assert s.comm_ms_by_op["broadcast"] == pytest.approx(0.04, abs=0.005)
    assert s.comm_ms == pytest.approx(12.30, abs=0.01)     # the broadcasts overlap no all-reduce
    assert s.overlapped_ms == pytest.approx(1.76, abs=0.01)
    assert s.backward_overlap_fraction == pytest.approx(1.76 / 12.30, abs=1e-3)
    # HTA-style, under any compute kernel: the same here, only backward kernels run under
    # communication in this step (equal up to float sums of ~1e3 µs-scale terms)
    assert s.overlap_fraction == pytest.approx(s.backward_overlap_fraction, abs=1e-9)
    assert s.backward_ms == pytest.approx(25.08, abs=0.01)


def test_a100_figures_draw_buckets_and_timeline(a100):
    rows = allreduce_sizes(a100, step=5)
    assert [(r.bucket, r.bytes) for r in rows if r.op == "all_reduce"] == [
        (0, 8_196_000), (1, 31_502_336), (2, 26_255_360), (3, 26_550_272), (4, 9_724_160)]
    assert [r.op for r in rows].count("broadcast") == 2
    ax = plot_allreduce_sizes(a100, step=5)
    assert len(ax.patches) == 7 and "5 all_reduce" in ax.get_title(loc="left")
    assert "2 broadcast" in ax.get_title(loc="left")
    ax = plot_timeline(a100, step=5)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0 compute", "rank 0 comm"]
    assert "backward 14%" in ax.get_title(loc="left")


# --- the gloo trace of rank 34 of 300 -------------------------------------------------------

def test_gloo_rank34_keeps_its_rank_and_its_two_threads():
    record = load_trace(GLOO34)
    assert record.world_size == 300 and {s.rank for s in record.spans} == {34}
    assert record.steps == [551]
    done = record.spans_of(kind="allreduce", step=551)
    # two gloo threads each all-reduce one tensor (Input Dims, float) inside ProfilerStep#551
    assert sorted((s.bytes, s.tid) for s in done) == [(321_271 * 4, "3553"), (2_082_411 * 4, "3554")]
    assert "12 spans lie outside every step (before the first ProfilerStep" in "\n".join(record.notes)
    assert describe(record).startswith("ranks [34] of 300, 1 steps")


# --- dpviz's own traces round-trip ----------------------------------------------------------

def test_dpviz_traces_load_like_the_live_record(tmp_path):
    record = load_trace(DPVIZ)
    assert record.world_size == 2 and record.steps == [0, 1, 2]
    assert [len(record.spans_of(rank=r, kind="allreduce", step=1)) for r in (0, 1)] == [4, 4]
    assert record.config["backend"] == "gloo"
    assert load(save(record, tmp_path / "record.json")) == record


# --- where the rank comes from --------------------------------------------------------------

def _without_info(tmp_path: Path, name: str) -> Path:
    trace = _trace(GLOO34)
    del trace["distributedInfo"]
    return _write(tmp_path, name, trace)


def test_rank_from_the_file_name_or_an_argument_and_said_so(tmp_path):
    named = load_trace(_without_info(tmp_path, "job-rank7.json"))
    assert {s.rank for s in named.spans} == {7} and named.world_size == 8
    assert "rank 7 (from file name)" in named.notes[0]
    assert any("world size 8 inferred" in n for n in named.notes)
    assert named.config["backend"] == "gloo" and any("backend gloo inferred" in n for n in named.notes)
    given = load_trace(_without_info(tmp_path, "trace.json"), ranks=[3])
    assert {s.rank for s in given.spans} == {3} and "from argument" in given.notes[0]
    alone = load_trace(_without_info(tmp_path, "trace.json"))   # one file: rank 0, as HTA reads it
    assert {s.rank for s in alone.spans} == {0}
    assert alone.notes[0].startswith("rank 0 (from default: no distributedInfo, none given, none "
                                     "in its name; HTA defaults to rank 0 too): trace.json,")
    with pytest.raises(TraceError, match="pass its rank"):   # several files: no guessing
        load_trace([_without_info(tmp_path, "trace.json"), _without_info(tmp_path, "other.json")])
    with pytest.raises(TraceError, match="distributedInfo says rank 34"):
        load_trace(GLOO34, ranks=[1])
    with pytest.raises(TraceError, match="both rank 0"):
        load_trace([DPVIZ[0], DPVIZ[0]])
    with pytest.raises(ValueError, match="1 ranks given for 2 files"):
        load_trace(DPVIZ, ranks=[0])


# --- file shapes ----------------------------------------------------------------------------

def test_gzip_or_not_and_any_chunk_size_give_the_same_record(tmp_path, monkeypatch):
    plain = tmp_path / "cpu-gloo-rank34.json"
    plain.write_bytes(gzip.decompress(GLOO34.read_bytes()))
    reference = load_trace(GLOO34)
    assert load_trace(plain).spans == reference.spans
    # chunk boundaries inside numbers, strings and keys: 7 characters at a time
    monkeypatch.setattr(trace_files, "CHUNK_CHARS", 7)
    assert load_trace(plain).spans == reference.spans


def test_without_isal_gzip_inflates_the_same_record(tmp_path, monkeypatch):
    """isal is optional: without it the stdlib's gzip reads the trace to the same record, and a
    corrupt deflate stream is a TraceError either way; small files never import isal."""
    import subprocess
    import sys

    assert trace_files._inflater(A100.stat().st_size)[0] is not gzip.GzipFile   # this suite: isal
    assert trace_files._inflater(trace_files.ISAL_FROM_BYTES - 1)[0] is gzip.GzipFile
    monkeypatch.setattr(trace_files, "ISAL_FROM_BYTES", 0)
    bad = tmp_path / "rank0.json.gz"
    bad.write_bytes(gzip.compress(b"{}")[:10] + b"not deflate at all" * 4)
    with pytest.raises(TraceError, match="cannot be read"):
        load_trace(bad)

    code = f"""
import importlib.abc, sys
class NoIsal(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "isal" or name.startswith("isal."):
            raise ImportError("isal is blocked")
sys.meta_path.insert(0, NoIsal())
import gzip, hashlib, pathlib, tempfile
from dpviz.analysis import trace_files as files
from dpviz.analysis.scan import TraceError
files.ISAL_FROM_BYTES = 0
assert files._inflater(1 << 30)[0] is gzip.GzipFile
print(hashlib.sha1(repr(files.load_trace({str(A100)!r}).spans).encode()).hexdigest())
bad = pathlib.Path(tempfile.mkdtemp()) / "rank0.json.gz"
bad.write_bytes(gzip.compress(b"{{}}")[:10] + b"not deflate at all" * 4)
try:
    files.load_trace(bad)
except TraceError as err:
    print("cannot be read" in str(err))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    digest, refused = done.stdout.split()
    assert digest == hashlib.sha1(repr(load_trace(A100).spans).encode()).hexdigest() and refused == "True"


def test_a_well_formed_trace_reaches_the_typed_reader_whole_whatever_the_chunks(tmp_path, monkeypatch):
    """The event a chunk cuts is read with the next chunk, in a batch: only the list's last
    event (no ',' follows it to cut after) goes to the value-by-value reader, never one per
    chunk (which fails on the cut value first)."""
    plain = tmp_path / "rank1.json"
    plain.write_bytes(gzip.decompress(A100.read_bytes()))
    events = json.loads(plain.read_text())["traceEvents"]
    for chunk in (4096, 1 << 20):
        monkeypatch.setattr(trace_files, "CHUNK_CHARS", chunk)
        one_by_one, batched = [], []
        stream_events(plain, one_by_one.append, batch=batched.extend)
        assert (one_by_one, len(batched)) == (events[-1:], len(events) - 1)


def test_fields_after_the_events_and_the_bare_array_form(tmp_path):
    trace = _trace(GLOO34)
    events = trace.pop("traceEvents")
    after = _write(tmp_path, "after.json", "{" + json.dumps(trace)[1:-1] + ', "traceEvents": '
                   + json.dumps(events) + "}")
    assert stream_events(after, lambda ev: None)["distributedInfo"]["rank"] == 34
    bare = _write(tmp_path, "rank34.json", events)
    assert load_trace(bare).spans == load_trace(GLOO34).spans


@pytest.mark.parametrize("text, message", [
    ("", "expected a trace object"),
    ("[1, 2", "expected ',' or ']'"),
    ('{"traceEvents": 3}', "traceEvents list"),
    ('{"schemaVersion": 1}', "no 'traceEvents' list"),
    ('{"traceEvents": []} trailing', "unexpected data after the trace"),
    ('{"traceEvents": [{"ph": "X", "cat": "python_function", "name": "f", "ts": 1, "dur": 1}]}',
     "holds no event dpviz can draw"),
    ("[1, 2, 3]", "is not a chrome trace"),
    ('[{"name": "x"}]', "is not a chrome trace"),
])
def test_broken_files_say_what_is_wrong(tmp_path, text, message):
    with pytest.raises(TraceError, match=message):
        load_trace(_write(tmp_path, "rank0.json", text))


def test_truncated_gzip_and_missing_files(tmp_path):
    cut = tmp_path / "rank0.json.gz"
    cut.write_bytes(GLOO34.read_bytes()[:1000])
    with pytest.raises(TraceError, match="cannot be read"):
        load_trace(cut)
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "nope.json")


# --- fuzzing: malformed traces → a record or a TraceError, never a crash or a hang ----------

@contextlib.contextmanager
def no_hang(seconds: int = 10):
    """Fail (instead of hanging the suite) if the body runs longer than `seconds`."""
    def stop(*_):
        raise TimeoutError(f"load_trace still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _load_or_trace_error(path: Path) -> None:
    with no_hang():
        try:
            record = load_trace(path, ranks=[0])
        except TraceError:
            return
    assert isinstance(record, RunRecord) and record.steps


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)
EVENT = st.fixed_dictionaries({}, optional={
    "ph": st.sampled_from(["X", "s", "f", "M", "i", "B", "C"]) | JSON,
    "cat": st.sampled_from(["kernel", "cpu_op", "user_annotation", "ac2g", "gpu_memcpy", "new"]) | JSON,
    "name": st.sampled_from(["ProfilerStep#1", "gloo:all_reduce", "ncclKernel_AllReduce_x(int)",
                             "DistributedDataParallel.forward", "nccl:all_reduce"]) | JSON,
    "ts": st.floats() | st.integers() | JSON, "dur": st.floats() | st.integers() | JSON,
    "tid": JSON, "id": st.integers() | JSON,
    "args": st.fixed_dictionaries({}, optional={
        "correlation": st.integers() | JSON, "stream": JSON, "In msg nelems": JSON, "dtype": JSON,
        "Input Dims": JSON, "Input type": JSON}) | JSON})
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(events=st.lists(EVENT | JSON, max_size=25), header=st.dictionaries(st.text(max_size=12), JSON, max_size=3))
def test_fuzz_odd_events_in_a_valid_file(tmp_path, events, header):
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps({**header, "traceEvents": events}))   # NaN/Infinity allowed, as json writes them
    _load_or_trace_error(path)


@FUZZ
@given(cut=st.integers(min_value=0, max_value=20_000), junk=st.binary(max_size=20))
def test_fuzz_truncated_and_corrupted_real_trace(tmp_path, cut, junk):
    raw = gzip.decompress(GLOO34.read_bytes())
    path = tmp_path / "fuzz.json"
    path.write_bytes(raw[:cut] + junk)
    _load_or_trace_error(path)
    path.write_bytes(gzip.compress(raw)[: cut // 8] + junk)
    _load_or_trace_error(path)


@FUZZ
@given(data=st.binary(max_size=200))
def test_fuzz_random_bytes(tmp_path, data):
    path = tmp_path / "fuzz.json"
    path.write_bytes(data)
    _load_or_trace_error(path)


# --- the command ----------------------------------------------------------------------------

def test_cli_load_trace_prints_buckets_and_writes_record_and_figures(tmp_path, capsys):
    assert cli(["load-trace", str(GLOO34), "--out", str(tmp_path), "--formats", "png,svg,pdf"]) == 0
    out = capsys.readouterr().out
    assert "step 551 rank 34 all_reduce bucket 1:    7.94 MiB" in out
    figures = {f"{stem}.{fmt}" for stem in ("timeline", "allreduce-sizes") for fmt in ("png", "svg", "pdf")}
    assert {p.name for p in tmp_path.iterdir()} == {"record.json", "summary.json"} | figures
    assert (tmp_path / "timeline.svg").read_text().lstrip().startswith("<?xml")   # vector, for slides
    assert (tmp_path / "timeline.pdf").read_bytes()[:5] == b"%PDF-"
    assert load(tmp_path / "record.json").config["ranks"] == [34]


def test_cli_load_trace_writes_png_by_default(tmp_path, capsys):
    assert cli(["load-trace", str(GLOO34), "--out", str(tmp_path / "new" / "out")]) == 0
    assert {p.name for p in (tmp_path / "new" / "out").iterdir()} == {
        "record.json", "summary.json", "timeline.png", "allreduce-sizes.png"}
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["out"]   # no staging left


@pytest.mark.parametrize("make, message", [
    (lambda d: _write(d, "rank0.json", '{"traceEvents": [{"ph": "X",'), "truncated or corrupt"),
    (lambda d: _write(d, "rank0.json", "[1, 2]"), "is not a chrome trace"),
    (lambda d: _write(d, "list.json", '[{"name": "a"}]'), "is not a chrome trace"),
    (lambda d: d / "nope.json", "no such trace file"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "holds no trace files"),
])
def test_every_bad_input_is_one_line_exit_2_and_leaves_no_out_folder(tmp_path, capsys, make, message):
    """Bad traces, for load-trace and report alike: one line, exit 2, nothing written."""
    bad = make(tmp_path)
    for argv in (["load-trace", str(bad), "--out", str(tmp_path / "out")],
                 ["report", str(bad), "--out", str(tmp_path / "page.html")]):
        with pytest.raises(SystemExit) as stop:
            cli(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"dpviz {argv[0]}: error:") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "page.html").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dpviz")]


def test_load_trace_and_report_take_a_folder_of_traces(tmp_path, capsys):
    folder = Path(__file__).parent / "data" / "nccl-sampled-ranks"   # also holds hta-0.5.0.json
    assert cli(["load-trace", str(folder)]) == 0
    assert "ranks [0, 1] of 128" in capsys.readouterr().out
    assert cli(["report", str(folder), "--out", str(tmp_path / "r.html")]) == 0


def test_cli_load_trace_rejects_a_corrupt_file_in_one_line(tmp_path, capsys):
    bad = _write(tmp_path, "rank0.json", '{"traceEvents": [{"ph": "X",')
    with pytest.raises(SystemExit) as stop:
        cli(["load-trace", str(bad)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("dpviz load-trace: error:") and "Traceback" not in err


def test_the_typed_batch_reader_reads_what_the_event_by_event_reader_reads(tmp_path):
    """Batches (msgspec, only the fields dpviz reads) and single events (json) agree, also
    around an odd event that makes its batch fall back to one event at a time."""
    from dpviz.analysis.scan import TraceScan
    from dpviz.analysis.trace_files import scan_file, stream_events

    def both(path):
        one_by_one = TraceScan()
        stream_events(path, one_by_one.add)
        return scan_file(path), one_by_one

    batched, single = both(A100)
    assert batched.spans == single.spans(0) and batched.events == single.events == 40_573
    events = json.loads(gzip.decompress(A100.read_bytes()))["traceEvents"]
    odd = tmp_path / "odd-rank0.json"
    odd.write_text(json.dumps({"traceEvents": events[:500] + [7, {"ph": "X", "args": [1]}]
                               + events[500:]}))
    batched, single = both(odd)
    assert batched.spans == single.spans(0) and batched.notes == single.notes(0)
    assert single.malformed == 2


def test_a_live_fsdp2_jobs_traces_show_all_gathers_and_reduce_scatters(tmp_path, capsys):
    """FSDP2 (fully_shard per Linear) on 2 gloo ranks, its own profiler traces loaded back:
    per step 5 all-gathers in forward (one per Linear) and 5 more in backward (resharded
    after forward), and 5 reduce-scatters — which gloo runs as all-reduces, as the notes say."""
    from dpviz.engine.launch import Cluster
    from dpviz.analysis.stragglers import straggler_ranking
    from rank_tasks import fsdp2_trace

    with Cluster(2, "gloo", 120) as cluster:
        paths = cluster.run_task(fsdp2_trace, str(tmp_path))
    record = load_trace(paths)
    for rank in (0, 1):
        for step in record.steps:
            ops = [s.op for s in record.spans_of(rank=rank, step=step) if s.kind == "collective"]
            assert ops.count("all_gather") == 10 and ops.count("reduce_scatter") == 5, ops
    assert "10 reduce_scatter as gloo:all_reduce" in "\n".join(record.notes)
    assert "all_gather" in describe(record) and "reduce_scatter" in describe(record)
    assert len(straggler_ranking(record)) == len(record.steps)   # matched across ranks
    assert cli(["load-trace", *paths, "--out", str(tmp_path / "out")]) == 0
    rows = json.loads((tmp_path / "out" / "summary.json").read_text())["rows"]
    assert all(set(r["comm_ms_by_op"]) == {"all_gather", "reduce_scatter"} for r in rows)
    assert cli(["report", *paths, "--out", str(tmp_path / "fsdp.html")]) == 0
    assert "reduce_scatter" in (tmp_path / "fsdp.html").read_text()


# --- the figure process: matplotlib imported beside the read --------------------------------
# pytest's own process runs threads (numpy's), so it draws here; the forked figure process is
# what a fresh `dpviz load-trace` uses, so these tests start fresh processes.

needs_fork = pytest.mark.skipif(sys.platform != "linux", reason="forking is used on Linux only")


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env=os.environ | {"MPLBACKEND": "Agg"})


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[16:24]   # the IHDR chunk: width, height
    return int.from_bytes(header[:4], "big"), int.from_bytes(header[4:], "big")


@needs_fork
def test_the_figure_process_writes_what_this_process_writes(tmp_path):
    assert not can_fork()   # pytest's process: the figures below are drawn here
    assert cli(["load-trace", str(GLOO34), "--out", str(tmp_path / "here")]) == 0
    done = _fresh_python(f"""
        import sys
        from dpviz.app.figure_process import can_fork
        assert can_fork()   # a fresh process, before numpy: the figures are drawn by a child
        from dpviz.app.cli import main
        sys.exit(main(["load-trace", {str(GLOO34)!r}, "--out", {str(tmp_path / "child")!r}]))
    """)
    assert done.returncode == 0, done.stderr
    here, child = (sorted(p.name for p in (tmp_path / d).iterdir()) for d in ("here", "child"))
    assert here == child == ["allreduce-sizes.png", "record.json", "summary.json", "timeline.png"]
    for name in ("timeline.png", "allreduce-sizes.png"):
        assert _png_size(tmp_path / "here" / name) == _png_size(tmp_path / "child" / name)


@needs_fork
def test_a_figure_process_left_before_it_draws_is_stopped_and_reaped():
    """A failed read leaves the block at once: the child, still importing, is killed and
    reaped, not orphaned and not waited for."""
    done = _fresh_python("""
        import os
        from dpviz.app.figure_process import FigureProcess
        try:
            with FigureProcess() as figures:
                pid = figures.pid
                raise ValueError("the read failed")
        except ValueError:
            pass
        assert figures.pid is None
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            print(pid)   # reaped: no longer this process's child
    """)
    assert done.returncode == 0, done.stderr
    with pytest.raises(ProcessLookupError):   # and gone, not living on as an orphan
        os.kill(int(done.stdout), 0)


@needs_fork
def test_a_figure_that_fails_in_the_child_raises_in_the_parent(tmp_path):
    done = _fresh_python(f"""
        from dpviz.app.figure_process import FigureProcess
        with FigureProcess() as figures:
            from dpviz.analysis.trace_files import load_trace
            figures.send(load_trace([{str(GLOO34)!r}]), 551, ["no-such-figure"], None, ("png",))
            figures.wait()
    """)
    assert done.returncode == 1
    assert "KeyError: 'no-such-figure'" in done.stderr   # the child's traceback
    assert "RuntimeError: drawing the figures ['no-such-figure'] failed" in done.stderr

"""Records load without torch, and a corrupt, foreign or future file fails clearly."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from dpviz.core.record import RecordError, RunRecord, Span, load, save


def _tiny() -> RunRecord:
    span = Span(rank=0, tid="1", name="dpviz:step#0", kind="step", start_us=0.0, end_us=10.0, step=0)
    return RunRecord(config={"world_size": 1}, world_size=1, spans=(span,), buckets=(),
                     micro_steps=(), losses={0: (0.5,)}, checks=(), ddp_logging={0: {}})


def test_round_trip(tmp_path):
    record = _tiny()
    assert load(save(record, tmp_path / "r.json")) == record


def test_records_load_without_torch(tmp_path):
    path = save(_tiny(), tmp_path / "r.json")
    code = ("import sys; sys.modules['torch'] = None\n"
            "from dpviz.core.record import load\n"
            f"print(load({str(path)!r}).world_size)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "1"


@pytest.mark.parametrize("content, message", [
    (b"", "not readable JSON"),
    (b"{not json", "not readable JSON"),
    (b"\x1f\x8b\x08garbage", "not readable JSON"),
    (b"[1, 2]", "not a dpviz record"),
    (json.dumps({"kind": "ddp_run", "schema_version": 99}).encode(), "schema_version 99"),
    (json.dumps({"kind": "recipe", "schema_version": 1}).encode(), "unknown kind 'recipe'"),
    (json.dumps({"kind": "ddp_run", "schema_version": 1}).encode(), "missing field"),
])
def test_bad_files_fail_clearly(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(RecordError, match=message):
        load(path)


def test_wrong_types_name_the_field(tmp_path):
    data = json.loads(json.dumps({"kind": "ddp_run", "schema_version": 1,
                                  **{k: v for k, v in _as_dict().items()}}))
    data["spans"][0]["start_us"] = "soon"
    path = tmp_path / "typed.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"spans\[0\]\.start_us"):
        load(path)


def _as_dict() -> dict:
    from dpviz.core.record import to_dict

    return {k: v for k, v in to_dict(_tiny()).items() if k not in ("kind", "schema_version")}


def test_missing_file_and_gzip(tmp_path):
    with pytest.raises(RecordError, match="no such file"):
        load(tmp_path / "nope.json")
    path = save(_tiny(), tmp_path / "r.json")
    gz = tmp_path / "r.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert load(gz) == _tiny()


def test_expecting_another_kind_is_refused(tmp_path):
    path = save(_tiny(), tmp_path / "r.json")

    class Other:
        KIND = "other"

    with pytest.raises(RecordError, match="expected 'other'"):
        load(path, expect=Other)


def test_every_record_kind_loads_cold_from_its_module():
    """`load()` imports a kind's module on first sight; a kind the source scan missed
    would load only after someone happened to import its module."""
    import importlib
    import pkgutil

    import dpviz
    from dpviz.core import record
    from dpviz.core.discover import record_modules

    for info in pkgutil.walk_packages(dpviz.__path__, "dpviz."):
        if info.name != "dpviz.__main__":   # importing it runs the command line
            importlib.import_module(info.name)
    defined = {kind: cls.__module__ for kind, cls in record._KINDS.items()}
    assert defined == record_modules()

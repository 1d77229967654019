"""Registries find their members in the source: a new subject declares its record kinds,
facade verbs and scene in its own files, and nothing central lists them."""
from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import dpviz
from dpviz.app.animate import SCENES, discover_scenes, scene_class
from dpviz.core.discover import facade_exports, record_modules

SUBJECT = '''
from dataclasses import dataclass
from .record import record_kind

FACADE = ("measure_widgets", "WidgetRecord")


@record_kind("widget_sweep", formerly=("gadget_sweep", "old_sweep"))
@dataclass(frozen=True)
class WidgetRecord:
    n: int


def measure_widgets(cfg=None, *, cluster=None, out=None):
    """Never called here."""
'''

SCENE = '''
from dpviz.app.scene import RecordScene


class WidgetScene(RecordScene):
    RECORD_TYPE = None
    RECORDED_BY = ("dpviz.widgets_subject:measure_widgets", {"n": 3})
    RECORD_FILE = "widgets.json"
'''


@pytest.fixture
def package(tmp_path) -> Path:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "widgets_records.py").write_text(SUBJECT)
    (pkg / "plain.py").write_text('"""mentions @record_kind("nope") and FACADE only in prose"""\n')
    return pkg


def test_a_subject_files_kinds_and_verbs_are_found_without_any_list(package):
    assert record_modules(package) == {"widget_sweep": "pkg.sub.widgets_records",
                                       "gadget_sweep": "pkg.sub.widgets_records",
                                       "old_sweep": "pkg.sub.widgets_records"}
    assert facade_exports(package) == {"measure_widgets": "sub.widgets_records",
                                       "WidgetRecord": "sub.widgets_records"}


def test_a_new_exercise_module_is_found_by_its_own_marker_not_on_the_top_facade(package):
    (package / "sub" / "juggle.py").write_text('EXERCISE_FACADE = ("check_juggle",)\n\n\n'
                                               'def check_juggle(fn=None, *, cluster=None):\n    pass\n')
    assert facade_exports(package / "sub", "EXERCISE_FACADE") == {"check_juggle": "juggle"}
    assert "check_juggle" not in facade_exports(package)
    import dpviz.lessons.exercises

    assert {"check_ring", "check_hook", "Verdict", "report"} <= set(dpviz.lessons.exercises.__all__)


def test_a_kind_or_verb_defined_twice_is_refused(package):
    (package / "again.py").write_text(SUBJECT)
    with pytest.raises(RuntimeError, match="widget_sweep.*both"):
        record_modules(package)
    with pytest.raises(RuntimeError, match="measure_widgets.*both"):
        facade_exports(package)


def test_a_scene_file_is_found_with_how_to_record_it(tmp_path):
    (tmp_path / "widgets.py").write_text(SCENE)
    (tmp_path / "helpers.py").write_text("def not_a_scene(): pass\n")
    (spec,) = discover_scenes(tmp_path).values()
    assert (spec.module, spec.cls, spec.record_file) == ("widgets", "WidgetScene", "widgets.json")
    assert (spec.recorded_by, spec.recorded_with) == ("dpviz.widgets_subject:measure_widgets", {"n": 3})
    (tmp_path / "broken.py").write_text(SCENE.replace('    RECORD_FILE = "widgets.json"\n', ""))
    with pytest.raises(ValueError, match="needs RECORD_FILE"):
        discover_scenes(tmp_path)


def test_the_tree_registers_every_kind_verb_and_scene():
    kinds = record_modules()
    assert {"ddp_run", "bucket_sweep", "accumulation_sweep", "checkpointing", "memory",
            "pipeline_sweep", "tensor_parallel", "expert_parallel", "collective"} <= set(kinds)
    assert kinds["memory"] == kinds["checkpointing"] == "dpviz.lessons.checkpointing.records"
    exports = facade_exports()
    assert {"run", "Cluster", "load", "sweep_buckets", "sweep_accumulation", "measure_checkpointing",
            "run_pipeline", "measure_tensor_parallel", "expert_parallel"} <= set(exports)
    assert sorted(exports) == dpviz.__all__
    assert set(SCENES) == {"ring", "buckets", "accumulation", "checkpointing", "fsdp"}


@pytest.mark.parametrize("name", sorted(SCENES))
def test_each_scene_names_a_live_verb_that_writes_its_record(name):
    spec = SCENES[name]
    module, _, verb = spec.recorded_by.partition(":")
    params = inspect.signature(getattr(importlib.import_module(module), verb)).parameters
    assert "out" in params
    assert set(spec.recorded_with) <= set(params) or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


@pytest.mark.manim
@pytest.mark.parametrize("name", sorted(SCENES))
def test_each_scene_class_loads_from_its_file_without_sys_path(name):
    before = list(sys.path)
    cls = scene_class(name)
    assert cls.__name__ == SCENES[name].cls and sys.path == before


def test_import_dpviz_stays_torch_free_and_finds_a_verb_without_importing_its_subject():
    code = ("import sys, dpviz; names = dir(dpviz); "
            "print('sweep_buckets' in names, 'torch' in sys.modules, 'dpviz.lessons.buckets.live' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "False"]

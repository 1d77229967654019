"""Set-up stays honest: one source of truth for dependencies, torch pinned on the CI path."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
# Python 3.11's; on 3.10 (pyproject admits it) these file checks, the same on every Python, skip
tomllib = pytest.importorskip("tomllib")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_installs_pyproject_with_its_extras():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert pip == ["-e .[dev]"], "environment.yml must install the package, not repeat its deps"
    extras = _pyproject()["project"]["optional-dependencies"]
    dev = re.fullmatch(r"dpviz\[(.*)\]", extras["dev"][0]).group(1).split(",")
    assert set(dev) == set(extras) - {"dev"}, "the dev extra must pull every other extra"
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    floor = _pyproject()["project"]["requires-python"].removeprefix(">=")
    assert tuple(map(int, python.split("=")[1].split("."))) >= tuple(map(int, floor.split(".")))


def test_the_package_admits_the_torch_range_run_and_the_set_up_pins_its_cpu_wheel():
    """pyproject admits the releases the suite ran under (README, Versions run), so a learner's
    own torch stays; the set-up CI and `make` use pins the CPU wheel on this disk."""
    torch = next(Requirement(d) for d in _pyproject()["project"]["dependencies"]
                 if Requirement(d).name == "torch")
    assert [v for v in ("2.11.0", "2.13.0", "2.15.0") if v not in torch.specifier] == []
    assert "2.10.0" not in torch.specifier and "2.16.0" not in torch.specifier
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert re.search(r"pip install -q torch==2\.13\.0", setup)
    assert not re.search(r"torch(?!==2\.13\.0)[<>=~!]", setup)


def test_ci_calls_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^```(?:bash|sh)?\n(.*?)```", readme, flags=re.S | re.M)[0].split("\n")
    test_command = next(c.split("#")[0].strip() for c in commands if "test" in c)
    assert test_command in (ROOT / ".ci" / "run").read_text()


def test_the_tour_and_the_readme_list_every_notebook():
    names = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    tour = (ROOT / "notebooks" / "00_tour.ipynb").read_text()
    readme = (ROOT / "README.md").read_text()
    assert [n for n in names if n != "00_tour" and f"`{n}`" not in tour] == []
    assert [n for n in names if f"`{n}`" not in readme] == []

"""Registries that find their members by reading dpviz's source, so nothing central lists them.

A subject declares what it offers where it defines it: a record type with
`@record_kind("name")`, its facade verbs in a module-level `FACADE = ("verb", ...)`, a
scene as a `RecordScene` subclass in `animations/`. These functions find them with a text
scan of the source files (no import: `load()` and `import dpviz` stay fast and torch-free),
cached per process.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]   # dpviz/
RECORD_KIND = re.compile(r'^@record_kind\(\s*"([^"]+)"(?:\s*,\s*formerly=\(([^)]*)\))?', re.M)


@functools.lru_cache(maxsize=None)
def _sources(package: Path = PACKAGE) -> tuple[tuple[str, str], ...]:
    """(module name, source text) of every module of the package (os.walk and plain string
    joins: pathlib's rglob and relative_to cost more than reading the files)."""
    found = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        prefix = package.name + folder[len(str(package)):].replace(os.sep, ".")
        for name in sorted(f for f in files if f.endswith(".py")):
            module = prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                found.append((module, f.read()))
    return tuple(found)


@functools.lru_cache(maxsize=None)
def record_modules(package: Path = PACKAGE) -> dict[str, str]:
    """Record kind (and every former name in `formerly=`) → the module that defines it."""
    found: dict[str, str] = {}
    for module, text in _sources(package):
        if "@record_kind(" not in text:
            continue
        for kind, formerly in RECORD_KIND.findall(text):
            for name in (kind, *re.findall(r'"([^"]+)"', formerly)):
                if found.setdefault(name, module) != module:
                    raise RuntimeError(f"record kind {name!r} is defined in both {found[name]} and {module}")
    return found


@functools.lru_cache(maxsize=None)
def facade_exports(package: Path = PACKAGE, marker: str = "FACADE") -> dict[str, str]:
    """Public name → the module (relative to the package) whose `FACADE` offers it.

    `marker` names another declaration for a subpackage's own facade (the exercises declare
    `EXERCISE_FACADE`, so `dpviz.lessons.exercises.check_ring` is found, and `dpviz.check_ring` is not).
    """
    pattern = re.compile(rf"^{marker}\s*=\s*(\([^)]*\))", re.M)
    found: dict[str, str] = {}
    for module, text in _sources(package):
        match = pattern.search(text) if marker in text else None
        if match is None:
            continue
        relative = module.partition(".")[2]
        for name in re.findall(r'"(\w+)"', match.group(1)):
            if found.setdefault(name, relative) != relative:
                raise RuntimeError(f"{package.name}.{name} is offered by both {found[name]} and {relative}")
    return found


COMMAND_FIELD = re.compile(r"^(NAME|HELP)\s*=\s*(.*(?:\n[ \t]+.*)*)", re.M)


@functools.lru_cache(maxsize=None)
def command_modules(package: Path = PACKAGE) -> dict[str, tuple[str, str]]:
    """Command name → (module, help) of every CLI command, `app/commands/<name>.py`, read
    from their `NAME = "…"` and `HELP = …` string literals, so
    `dpviz --help` imports none of them and `dpviz X` imports only X's module."""
    import ast

    files = list((package / "app" / "commands").glob("*.py"))
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(files):
        if path.name.startswith("_"):
            continue
        fields = dict(COMMAND_FIELD.findall(path.read_text(encoding="utf-8")))
        if set(fields) != {"NAME", "HELP"}:
            raise RuntimeError(f"{path} is a command file without a NAME and HELP at module level")
        name, help_ = (ast.literal_eval(fields[k]) for k in ("NAME", "HELP"))
        module = f"app.commands.{path.stem}"
        if name in found:
            raise RuntimeError(f"command {name!r} is defined in both {found[name][0]} and {module}")
        found[name] = (module, help_)
    return found

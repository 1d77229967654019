"""dpviz: run data-parallel training on live ranks, record it, draw it.

Data flows one way: run (`Cluster`, `run`, the subject verbs) → record (`load`, `save`) →
render (`dpviz.plots`, `dpviz.widgets`, `animations/`). Each module offers its public names
in a module-level `FACADE = (...)`; `dpviz.<name>` finds them by reading the source
(`dpviz.discover`) and imports the module on first use, so `import dpviz` is instant and
needs no torch (a saved record renders without it).
"""
from __future__ import annotations

import importlib


def _exports() -> dict[str, str]:
    from .discover import facade_exports

    return facade_exports()


def __getattr__(name: str):
    if name == "__all__":
        return sorted(_exports())
    module = _exports().get(name)
    if module is None:
        raise AttributeError(f"module 'dpviz' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # cache: the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_exports()))

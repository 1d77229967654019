"""Factories for `--model MODULE:FUNCTION` in tests (ranks import this module by name)."""
from __future__ import annotations


def tied_gpt():
    """The built-in GPT with its head tied to the token embedding (nanoGPT's choice)."""
    import dataclasses

    from dpviz.config import RunConfig
    from dpviz.workloads import build_gpt

    return dataclasses.replace(build_gpt(RunConfig(model="gpt"), tie_head=True), name="tied_gpt")

"""dpviz: run data-parallel training on live ranks, record it, draw it.

Data flows one way: run (`Cluster`, `run`) → record (`RunRecord`, `load`, `save`) →
render (`dpviz.plots`, `dpviz.widgets`, `animations/`).
"""
from .config import RunConfig
from .ddp_run import run
from .launch import Cluster, RankError, RankTimeout
from .record import RecordError, RunRecord, load, save
from .timeline import describe, summarize

__all__ = ["Cluster", "RankError", "RankTimeout", "RecordError", "RunConfig", "RunRecord",
           "describe", "load", "run", "save", "summarize"]

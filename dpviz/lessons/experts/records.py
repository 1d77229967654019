"""Expert parallelism, the data side: what one MoE layer over live ranks records (tokens
routed, bytes exchanged, the check against one process). No torch; `dpviz.lessons.experts.live` runs it.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpviz.core.record import record_kind


@dataclass(frozen=True)
class ExpertLayerRun:
    """One MoE forward over every rank's tokens."""

    skew: float                                   # logit bonus the router gives expert 0
    tokens_per_rank: int
    d_model: int
    sent_tokens: tuple[tuple[int, ...], ...]      # [source rank][expert] tokens dispatched
    bytes_sent: tuple[int, ...]                   # per rank, dispatch + combine, to other ranks only
    dispatch_bytes_sent: tuple[int, ...]          # per rank, the dispatch part (its tokens going out)
    bytes_received: tuple[int, ...]               # per rank, dispatch + combine, from other ranks only
    max_diff_vs_single_process: float             # max |expert-parallel output − one-process MoE|
    exchange_ms: tuple[float, ...]                # per rank: wall time of the two all-to-alls
    reference_max_abs: float | None = None        # max |one-process MoE output|: the diff's scale

    @property
    def tokens_per_expert(self) -> tuple[int, ...]:
        return tuple(sum(row[e] for row in self.sent_tokens) for e in range(len(self.sent_tokens[0])))

    @property
    def imbalance(self) -> float:
        """Busiest expert's tokens ÷ the mean: the straggler factor of the expert compute."""
        counts = self.tokens_per_expert
        return max(counts) * len(counts) / sum(counts)


@record_kind("expert_parallel")
@dataclass(frozen=True)
class ExpertParallelRecord:
    config: dict
    runs: tuple[ExpertLayerRun, ...]

"""Expert parallelism drawn from its record: tokens per expert, bytes per rank."""
from __future__ import annotations

from dpviz.lessons.experts.records import ExpertParallelRecord
from dpviz.plots import style


def _label(run) -> str:
    return "unbiased router" if run.skew == 0 else f"router bias +{run.skew:g} on expert 0"


def plot_tokens_per_expert(record: ExpertParallelRecord, ax=None):
    """Tokens each expert received, stacked by the rank they came from; dashed = perfect balance."""
    ax = style.new_axes(ax, figsize=(7, 3.2))
    experts = len(record.runs[0].sent_tokens[0])
    width = 0.8 / experts
    for k, run in enumerate(record.runs):
        for e in range(experts):
            x, bottom = k + (e - (experts - 1) / 2) * width, 0
            for src, row in enumerate(run.sent_tokens):
                ax.bar(x, row[e], width * 0.9, bottom=bottom, color=style.rank_color(src),
                       label=f"from rank {src}" if k == 0 and e == 0 else None)
                bottom += row[e]
            ax.text(x, bottom, f"E{e}\n{bottom}", ha="center", va="bottom", fontsize=7)
        mean = sum(run.tokens_per_expert) / experts
        ax.hlines(mean, k - 0.45, k + 0.45, color=style.MUTED, ls="--", lw=1)
    ax.set_xticks(range(len(record.runs)),
                  [f"{_label(r)}\nbusiest ×{r.imbalance:.2f} of mean" for r in record.runs], fontsize=8)
    ax.set_ylabel("tokens routed to the expert")
    ax.margins(y=0.2)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_exchange_bytes(record: ExpertParallelRecord, ax=None):
    """Bytes each rank sent to other ranks per router: dispatch (solid) + combine (hatched)."""
    ax = style.new_axes(ax, figsize=(7, 3))
    ranks = len(record.runs[0].bytes_sent)
    width = 0.8 / ranks
    for k, run in enumerate(record.runs):
        for r in range(ranks):
            x = k + (r - (ranks - 1) / 2) * width
            dispatch = run.dispatch_bytes_sent[r] / 1024
            combine = run.bytes_sent[r] / 1024 - dispatch
            ax.bar(x, dispatch, width * 0.9, color=style.rank_color(r),
                   label=f"rank {r}: dispatch (its tokens out)" if k == 0 else None)
            ax.bar(x, combine, width * 0.9, bottom=dispatch, color="white", edgecolor=style.rank_color(r),
                   hatch="//", label=f"rank {r}: combine (results back)" if k == 0 else None)
            ax.text(x, dispatch + combine, f"{dispatch + combine:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(record.runs)), [_label(r) for r in record.runs], fontsize=8)
    ax.set_ylabel("KiB sent to other ranks")
    ax.margins(y=0.15)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    style.tidy(ax)
    style.tag(ax, "live")
    return ax


def plot_expert_parallel(record: ExpertParallelRecord):
    """Tokens per expert above the bytes exchanged, each a notebook column wide: side by side
    the routers' tick labels run into each other, and a wider figure is shown scaled down,
    its type with it. Returns the Figure."""
    import matplotlib.pyplot as plt

    fig, (tokens, exchange) = plt.subplots(2, 1, figsize=(style.COLUMN_IN, 6.6), layout="constrained")
    plot_tokens_per_expert(record, tokens)
    plot_exchange_bytes(record, exchange)
    return fig

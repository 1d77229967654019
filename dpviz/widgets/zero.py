"""The ZeRO memory calculator as a panel: sliders for Ψ, N, stage (and K); no torch here."""
from __future__ import annotations

import ipywidgets as w
import matplotlib.pyplot as plt
from IPython.display import display

from ..plots.zero import GB, plot_zero_stages
from ..zero import K_MIXED, STAGES, zero_memory


def zero_calculator(psi_billions: float = 7.5, world_size: int = 64, stage: int = 3,
                    k: float = K_MIXED, device_gb: float = 80.0) -> w.VBox:
    """Sliders for Ψ (billions), N, stage and K; redraws the per-stage bars and a summary line."""
    psi = w.FloatLogSlider(value=psi_billions, base=10, min=-1, max=3, step=0.05,
                           description="Ψ (billion)", continuous_update=False)
    ranks = w.SelectionSlider(options=[2 ** i for i in range(11)], value=world_size,
                              description="N ranks", continuous_update=False)
    chosen = w.IntSlider(value=stage, min=STAGES[0], max=STAGES[-1], description="stage")
    bytes_k = w.IntSlider(value=int(k), min=0, max=20, description="K bytes/Ψ")
    summary = w.Label()
    out = w.Output()

    def redraw(_=None) -> None:
        b = zero_memory(psi.value * 1e9, ranks.value, chosen.value, bytes_k.value)
        fits = "fits" if b.total <= device_gb * GB else "does NOT fit"
        summary.value = (f"stage {chosen.value}: {b.params / GB:.2f} + {b.grads / GB:.2f} + "
                         f"{b.optimizer / GB:.2f} = {b.total / GB:.2f} GB per rank — {fits} in "
                         f"{device_gb:g} GB (before activations)")
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
            plot_zero_stages(psi.value * 1e9, ranks.value, bytes_k.value, chosen.value, ax=ax)
            display(fig)
            plt.close(fig)

    for slider in (psi, ranks, chosen, bytes_k):
        slider.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([psi, ranks]), w.HBox([chosen, bytes_k]), summary, out])

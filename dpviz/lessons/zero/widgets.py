"""The ZeRO memory calculator as a panel: a recipe, Ψ, N, stage and bytes per parameter; no torch."""
from __future__ import annotations

import ipywidgets as w
import matplotlib.pyplot as plt
from IPython.display import display

from dpviz.lessons.zero.plots import GB, plot_zero_stages
from dpviz.lessons.zero.records import RECIPES, STAGES, zero_memory
from dpviz.widgets.recorded import Apart, gridded, recordable, recording_tag

# the site's grids for the continuous knobs (`gridded`; any value with a kernel):
PSI_GRID = (1.5, 7.5, 70.0, 175.0)   # billions: GPT-2 XL, the ZeRO paper's example, a 70 B, GPT-3
PARAM_GRID, GRAD_GRID, K_GRID = (1, 2, 4), (0, 2, 4), (0, 4, 8, 12, 16)   # bytes per parameter


def zero_calculator(psi_billions: float = 7.5, world_size: int = 64, stage: int = 3,
                    recipe: str = "mixed-precision Adam", device_gb: float = 80.0) -> w.VBox:
    """Sliders for Ψ (billions), N, stage and the bytes per parameter of parameters, gradients and
    optimizer state (K); a recipe menu sets those three. Redraws the per-stage bars and a summary.
    While a site is built (`dpviz.widgets.recorded`), N × stage × recipe is recorded; apart from
    them, each at the panel's start of the others, Ψ (on PSI_GRID) × N, and the bytes sliders on
    their grids: the product of all seven would be some 8 000 figures, and even Ψ × N × stage
    × recipe (704) outran make book's cell timeout (300 s) on a loaded 2-core machine.
    """
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; choose one of {', '.join(RECIPES)}")
    psi = gridded(w.FloatLogSlider(value=psi_billions, base=10, min=-1, max=3, step=0.05,
                                   description="Ψ (billion)", continuous_update=False), PSI_GRID)
    ranks = w.SelectionSlider(options=[2 ** i for i in range(11)], value=world_size,
                              description="N ranks", continuous_update=False)
    chosen = w.IntSlider(value=stage, min=STAGES[0], max=STAGES[-1], description="stage")
    menu = w.Dropdown(options=list(RECIPES), value=recipe, description="recipe")
    start = RECIPES[recipe]
    p_bytes = gridded(w.IntSlider(value=int(start.param_bytes), min=1, max=8, description="params B/Ψ"),
                      PARAM_GRID)
    g_bytes = gridded(w.IntSlider(value=int(start.grad_bytes), min=0, max=8, description="grads B/Ψ"), GRAD_GRID)
    bytes_k = gridded(w.IntSlider(value=int(start.k), min=0, max=20, description="K bytes/Ψ"), K_GRID)
    summary, hint = w.Label(), w.Label()
    out = w.Output()
    setting = [False]              # a recipe sets three sliders: redraw once, not three times
    drawn = w.Image(format="png")  # the figure as PNG, drawn instead of shown while a site records

    def use_recipe(_=None) -> None:
        r = RECIPES[menu.value]
        setting[0] = True
        p_bytes.value, g_bytes.value, bytes_k.value = int(r.param_bytes), int(r.grad_bytes), int(r.k)
        setting[0] = False
        redraw()

    def redraw(_=None) -> None:
        if setting[0]:
            return
        b = zero_memory(psi.value * 1e9, ranks.value, chosen.value, bytes_k.value,
                        p_bytes.value, g_bytes.value)
        fits = "fits" if b.total <= device_gb * GB else "does NOT fit"
        summary.value = (f"stage {chosen.value}: {b.params / GB:.2f} + {b.grads / GB:.2f} + "
                         f"{b.optimizer / GB:.2f} = {b.total / GB:.2f} GB per rank — {fits} in "
                         f"{device_gb:g} GB (before activations)")
        matching = [name for name, r in RECIPES.items()
                    if (r.param_bytes, r.grad_bytes, r.k) == (p_bytes.value, g_bytes.value, bytes_k.value)]
        per = p_bytes.value + g_bytes.value + bytes_k.value
        hint.value = (f"{p_bytes.value} + {g_bytes.value} + {bytes_k.value} = {per} bytes per parameter "
                      + (f"= {matching[0]} (K: {RECIPES[matching[0]].holds})" if matching
                         else "(no named recipe)"))
        fig, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
        plot_zero_stages(psi.value * 1e9, ranks.value, bytes_k.value, chosen.value, ax=ax,
                         param_bytes=p_bytes.value, grad_bytes=g_bytes.value)
        if recording_tag():        # for the site's recorded view: the Output's copy lives in the frontend
            drawn.value = _png(fig)
        else:
            with out:
                out.clear_output(wait=True)
                display(fig)
        plt.close(fig)

    menu.observe(use_recipe, names="value")
    for slider in (psi, ranks, chosen, p_bytes, g_bytes, bytes_k):
        slider.observe(redraw, names="value")
    redraw()
    panel = w.VBox([w.HBox([psi, ranks]), w.HBox([chosen, menu]), summary,
                    w.HBox([p_bytes, g_bytes, bytes_k]), hint, out])
    views = [summary, hint, drawn]
    start = f"as the panel starts: Ψ = {psi.value:g} B, N = {ranks.value}, stage {chosen.value}"
    return recordable(panel, "ZeRO calculator", controls=[ranks, chosen, menu], views=views, live_only=[out],
                      note=f"Ψ = {psi.value:g} B as the panel starts; bytes per parameter: the recipe's",
                      apart=[Apart([psi, ranks], views, note=f"as the panel starts: stage {chosen.value}, {menu.value}"),
                             Apart([p_bytes, g_bytes, bytes_k], views, note=start)])


def _png(fig) -> bytes:
    """The figure as PNG at its own size and dpi (laid out by constrained layout: one draw)."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()

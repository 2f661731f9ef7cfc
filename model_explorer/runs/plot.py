"""The layers x modules heatmap that Trace.plot and RunDiff.plot draw (matplotlib, Agg-safe)."""

from __future__ import annotations

import numpy as np

from ..model.decoder_points import LAYER_MODULES


def heatmap(values: np.ndarray, label: str, title: str, marks=(), cmap: str = "viridis",
            vmin: float | None = None, vmax: float | None = None):
    """values: (layers, len(LAYER_MODULES)); marks: (layer, module, text) written on their cells;
    vmin/vmax: the colour scale's ends (default: the values' own range).

    A Figure outside pyplot's list (figures.new_figure): a notebook shows it as an image, once;
    a script saves it."""
    from ..figures import new_figure

    layers = values.shape[0]
    fig = new_figure(figsize=(7.5, 1.2 + 0.28 * max(layers, 4)))
    ax = fig.add_subplot(1, 1, 1)
    shown = np.ma.masked_invalid(values)
    image = ax.imshow(shown, aspect="auto", cmap=cmap, interpolation="nearest", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(LAYER_MODULES)), LAYER_MODULES, rotation=40, ha="right", fontsize=8)
    step = max(1, layers // 16)
    ax.set_yticks(range(0, layers, step))
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, label=label)
    for layer, module, text in marks:
        if module in LAYER_MODULES:
            ax.text(LAYER_MODULES.index(module), layer, text, ha="center", va="center", color="red",
                    fontsize=8, fontweight="bold")
    fig.tight_layout()
    return fig

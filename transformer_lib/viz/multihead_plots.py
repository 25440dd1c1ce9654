"""Chapter 03's figures: every head of one layer at a glance."""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch


def heads_figure(layer_maps: torch.Tensor, tokens: Sequence[str], title: str, labels: Sequence[str] | None = None,
                 cols: int = 4, gap: int = 2):
    """One layer's heads, ``layer_maps: (H, T, T)``, as a grid of heatmaps drawn in a single image (fast to render);
    rows: queries, columns: keys. ``labels``: one word per head, shown in its title."""
    H, T = layer_maps.shape[0], layer_maps.shape[-1]
    rows, size = -(-H // cols), T + gap
    canvas = np.full((rows * size - gap, cols * size - gap), np.nan)  # NaN gaps between heads stay blank
    for h in range(H):
        r, c = divmod(h, cols)
        canvas[r * size:r * size + T, c * size:c * size + T] = layer_maps[h].numpy()
    fig, ax = plt.subplots(figsize=(9, 7.4))
    im = ax.imshow(canvas, cmap="viridis", vmin=0, vmax=1)
    for h in range(H):
        r, c = divmod(h, cols)
        ax.text(c * size + T / 2 - 0.5, r * size - 0.8, f"head {h}" + (f": {labels[h]}" if labels else ""),
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks([c * size + j for c in range(cols) for j in range(T)], tokens * cols, rotation=90, fontsize=6)
    ax.set_yticks([r * size + i for r in range(rows) for i in range(T)], tokens * rows, fontsize=6)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    fig.colorbar(im, ax=ax, fraction=0.03, label="attention weight")
    ax.set_title(title, pad=18)
    return fig

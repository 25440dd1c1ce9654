"""Chapter 05's cross-attention figures: several ``(T_out, S)`` maps in a grid whose text stays readable.

Used in chapter 05.

The grid is at most ``width`` inches wide (the book's column shows a frame at about its natural size), its
tick labels are 8 pt and horizontal: single characters fit side by side where rotated ones would overlap.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from .plots import plot_attention

FONT_PT = 8  # the smallest text in these figures


def plot_attention_grid(panels, suptitle: str, ncols: int = 2, width: float = 9.0, row_height: float = 2.7):
    """One heatmap per panel, ``ncols`` per row. ``panels``: ``(weights (T_out, S), source_labels,
    output_labels, title)`` tuples. Returns the figure."""
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, row_height * nrows + 0.6), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= len(panels):
            ax.set_visible(False)
            continue
        w, source, output, title = panels[k]
        plot_attention(w, source, output, ax=ax, title=title, annotate=False, colorbar=False)
        ax.set_xticks(range(len(source)), source, rotation=0, ha="center", fontsize=FONT_PT)
        ax.set_yticks(range(len(output)), output, fontsize=FONT_PT)
        ax.set_xlabel("source character" if k // ncols == nrows - 1 else "", fontsize=FONT_PT + 1)
        ax.set_ylabel("output character" if k % ncols == 0 else "", fontsize=FONT_PT + 1)
        ax.title.set_fontsize(FONT_PT + 1)
    fig.suptitle(suptitle, fontsize=FONT_PT + 2)
    fig.tight_layout()
    return fig


def cross_attention_heads_figure(source, output, weights, layer: int, text: str, width: float = 9.0):
    """Every head of one decoder layer: ``weights: (n_layers, n_heads, T_out, S)`` from
    ``experiments.cross_attention.cross_attention_maps``."""
    panels = [(weights[layer, h], source, output, f"head {h}") for h in range(weights.shape[1])]
    return plot_attention_grid(
        panels, f"Cross-attention, decoder layer {layer}: {text!r} -> {''.join(output[:-1])!r}", width=width
    )

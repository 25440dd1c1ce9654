"""Plotting helpers shared by the chapters: attention heatmaps and positional-encoding images.

Used in chapters 02, 03, 04 and 06.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..utils.checks import check_equal


def _np(x) -> np.ndarray:
    return x.detach().float().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def plot_attention(
    weights,
    x_labels=None,
    y_labels=None,
    ax=None,
    title: str = "Attention weights",
    annotate: bool | None = None,
    cmap: str = "viridis",
    vmax: float | None = 1.0,
    colorbar: bool = True,
):
    """Heatmap of one ``(Tq, Tk)`` attention matrix: rows are queries, columns keys.

    ``annotate`` writes each weight in its cell (default: when the matrix is at most 12 x 12).
    Returns the matplotlib ``Axes``.
    """
    w = _np(weights)
    check_equal("weights.ndim", w.ndim, 2, note=f"one (Tq, Tk) matrix; its shape is {w.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * w.shape[1] + 2.2, 0.5 * w.shape[0] + 1.2))
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(
        range(w.shape[1]), x_labels if x_labels is not None else range(w.shape[1]), rotation=60, ha="right", fontsize=8
    )
    ax.set_yticks(range(w.shape[0]), y_labels if y_labels is not None else range(w.shape[0]), fontsize=8)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title, fontsize=10)
    if annotate is None:
        annotate = max(w.shape) <= 12
    if annotate:
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(
                    j,
                    i,
                    f"{w[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if w[i, j] < 0.6 * (vmax or w.max()) else "black",
                )
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return ax


def plot_positional_encoding(pe, ax=None, title: str = "Sinusoidal positional encoding"):
    """Image of a ``(T, d_model)`` encoding table: position ``pos`` down, dimension across (column ``2i`` holds
    the sine of pair ``i``, column ``2i + 1`` its cosine, as in the formula ``PE[pos, 2i]``)."""
    pe = _np(pe)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    im = ax.imshow(pe, cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension 2i (sin) and 2i + 1 (cos): pair i = column // 2")
    ax.set_ylabel("position pos")
    ax.set_title(title, fontsize=10)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="value")
    return ax

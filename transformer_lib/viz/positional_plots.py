"""Chapter 04's static figure of the sinusoidal table: the wavelength of each (sin, cos) pair for a few widths.

Used in chapter 04.

The table itself, two positions' dot product and a RoPE rotation are live figures (``viz/live.py``).
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np


def pair_wavelengths(d_model: int, base: float = 10000.0) -> np.ndarray:
    """Positions per full turn of each pair ``i`` of a ``d_model``-wide sinusoidal table: ``2 pi base^(2i/d)``,
    shape ``(d_model / 2,)`` (Vaswani et al. 2017, sec. 3.5)."""
    two_i = np.arange(0, d_model, 2)
    return 2 * np.pi * base ** (two_i / d_model)


def plot_wavelengths(widths: Sequence[int] = (16, 64, 512), ax=None):
    """The wavelength of every pair against its place ``2i / d_model`` in the vector, one line per width."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.4))
    for d in widths:
        two_i = np.arange(0, d, 2)
        ax.semilogy(two_i / d, pair_wavelengths(d), "o-", ms=2, lw=0.8, label=f"d_model = {d} ({d // 2} pairs)")
    ax.set(xlabel="2i / d_model (place of the pair in the vector)", ylabel="wavelength (positions)",
           title="Wavelength of each pair", ylim=(3, 1e5))
    ax.legend(fontsize=8)
    return ax

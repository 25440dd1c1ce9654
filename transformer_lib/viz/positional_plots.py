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
    """The wavelength of every pair against its place ``2i / d_model`` in the vector, one line per width.

    On this axis every width follows the same line (the wavelength depends on ``d_model`` only through
    ``2i / d_model``), so the widths are told apart by their markers and by where they end: each line's last pair
    is drawn large and its wavelength listed bottom right, under the limit ``2 pi base`` (dashed)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    markers, ends = ["s", "o", "."], []
    for k, d in enumerate(widths):
        two_i, wl = np.arange(0, d, 2), pair_wavelengths(d)
        (line,) = ax.semilogy(
            two_i / d,
            wl,
            marker=markers[k % len(markers)],
            ms=6 - 2 * (k % 3),
            lw=0.8,
            mfc="none" if k % 3 < 2 else None,
            label=f"d_model = {d} ({d // 2} pairs)",
        )
        ax.plot(two_i[-1] / d, wl[-1], marker="o", ms=9, color=line.get_color(), mfc="none", mew=1.6)
        ends.append((f"d_model = {d}: {wl[-1]:,.0f}", line.get_color()))
    for k, (text, colour) in enumerate(ends):  # the last pair's wavelength, listed bottom right
        ax.text(
            0.98, 0.05 + 0.08 * (len(ends) - 1 - k), text, transform=ax.transAxes, ha="right", fontsize=8, color=colour
        )
    ax.text(0.98, 0.05 + 0.08 * len(ends), "last pair's wavelength:", transform=ax.transAxes, ha="right", fontsize=8)
    ax.axhline(2 * np.pi * 10000.0, color="0.4", ls="--", lw=0.8, label="limit 2π · 10000")
    ax.set(
        xlabel="2i / d_model (place of the pair in the vector)",
        ylabel="wavelength (positions)",
        title="Wavelength of each pair; large circles: each width's last pair",
        ylim=(3, 1.5e5),
        xlim=(-0.03, 1.03),
    )
    ax.legend(fontsize=8, loc="upper left")
    return ax

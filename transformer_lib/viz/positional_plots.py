"""Chapter 04's figures of the sinusoidal position table: one position as clock hands, and the pairs' wavelengths."""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..positional import sinusoidal_table


def sinusoid_clocks(pos: int, d_model: int = 32):
    """``PE[pos]`` of the sinusoidal table as bars (sin on even dims, cos on odd), and each (sin, cos) pair as a
    clock hand at angle ``pos * omega_i``. Returns ``(figure, caption)``."""
    v = sinusoidal_table(pos + 1, d_model)[pos].numpy()  # (d_model,)
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d_model/2,) radians/position
    fig, (ax_bar, ax_clock) = plt.subplots(2, 1, figsize=(7.5, 5.4),
                                           gridspec_kw={"height_ratios": [1.2, 1], "hspace": 0.45})
    dims = np.arange(d_model)
    ax_bar.bar(dims[0::2], v[0::2], color="tab:blue")
    ax_bar.bar(dims[1::2], v[1::2], color="tab:orange")
    ax_bar.set(ylim=(-1.1, 1.1), xlabel="dimension", ylabel="value",
               title=f"PE[{pos}], d_model = {d_model} (blue: sin, even dims; orange: cos, odd dims)")
    circle = np.linspace(0, 2 * np.pi, 60)
    for i in range(d_model // 2):
        cx, cy = 2.6 * (i % 8), -2.9 * (i // 8)  # rows of 8 clocks
        ax_clock.plot(cx + np.cos(circle), cy + np.sin(circle), color="0.7", lw=0.8)
        # the hand points at angle pos * omega_i: its (x, y) is (cos, sin) = (PE[2i+1], PE[2i])
        ax_clock.plot([cx, cx + v[2 * i + 1]], [cy, cy + v[2 * i]], color="tab:red", lw=2)
        ax_clock.text(cx, cy - 1.3, f"pair {i}", ha="center", va="top", fontsize=7)
    ax_clock.set_aspect("equal")
    ax_clock.axis("off")
    ax_clock.set_title("pair i = (dim 2i, dim 2i+1) as a clock hand at angle pos · ω_i", fontsize=9)
    turns = pos * omega / (2 * math.pi)
    middle, last = d_model // 4 - 1, d_model // 2 - 1
    caption = (f"position {pos}: pair 0 has turned {turns[0]:.2f} times, pair {middle} {turns[middle]:.3f} times, "
               f"pair {last} {turns[last]:.5f} times.")
    return fig, caption


def sinusoid_wavelengths(d: int, pos: int = 10):
    """The wavelength of every (sin, cos) pair of a ``d``-wide sinusoidal table, and ``PE[pos]``. Returns
    ``(figure, caption)``."""
    two_i = np.arange(0, d, 2)
    wavelength = 2 * np.pi * 10000.0 ** (two_i / d)  # positions per full turn
    v = sinusoidal_table(pos + 1, d)[pos].numpy()
    fig, (ax_w, ax_v) = plt.subplots(1, 2, figsize=(9, 3.2))
    ax_w.semilogy(two_i, wavelength, "o-", ms=2.5)
    ax_w.set(xlabel="dimension 2i", ylabel="wavelength (positions)", title=f"wavelength per pair, d_model = {d}",
             ylim=(3, 1e5))
    ax_v.plot(two_i, v[0::2], ".", color="tab:blue", label="sin (dim 2i)")
    ax_v.plot(two_i + 1, v[1::2], ".", color="tab:orange", label="cos (dim 2i+1)")
    ax_v.set(xlabel="dimension", ylabel="value", ylim=(-1.1, 1.1), title=f"PE[{pos}], d_model = {d}")
    ax_v.legend(fontsize=7, loc="lower right")
    plt.tight_layout()
    caption = (f"d_model = {d}: {d // 2} pairs, wavelengths from {wavelength[0]:.2f} to {wavelength[-1]:,.0f} "
               f"positions.")
    return fig, caption

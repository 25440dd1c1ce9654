"""Chapter 09's quantization figure: one weight row, its integer grid, and what rounding to it costs.

``grid_frame`` draws, for one row of a weight matrix, the histogram of its values with the grid of
representable values overlaid (the row's grid, or with groups the grid of a typical group: the one with the
median scale), and the error of every weight after the round trip next to its bound ``scale / 2``.
``grid_slider`` precomputes a frame per ``(bits, group_size)`` setting and shows them under two sliders linked
in the browser (no kernel needed).
"""
from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from ..quant_storage import bits_per_weight
from ..quantization import int_range, quantize
from .widgets import WIDE, figure_to_png


def _setting_name(bits: int, group_size: int | None) -> str:
    return f"int{bits}, " + ("one scale per row" if group_size is None else f"groups of {group_size}")


@torch.no_grad()
def grid_frame(w: torch.Tensor, bits: int, group_size: int | None, row: int | None = None,
               error_ylim: tuple[float, float] | None = None, title: str = ""):
    """One setting: ``(figure, caption_html)`` for the weight matrix ``w: (N, K)`` (absmax, float16 scales).

    ``row``: which row to draw (default: the one holding the largest ``|w|``). ``error_ylim`` fixes the error
    axis so that frames of a slider compare at a glance.
    """
    if w.dim() != 2:
        raise ValueError(f"w must be a (N, K) weight matrix, got shape {tuple(w.shape)}")
    w = w.detach().float().cpu()
    row = int(w.abs().amax(dim=1).argmax()) if row is None else row
    gran = "channel" if group_size is None else "group"
    qt = quantize(w, bits, True, gran, group_size, scale_dtype=torch.float16)
    err = (w - qt.dequantize()).abs()  # (N, K)
    x, e = w[row], err[row]  # (K,)
    K = w.shape[1]
    g = K if group_size is None else group_size
    scales = qt.scale[row].float()  # (n_groups,)
    typical = int(scales.argsort()[len(scales) // 2])  # the group with the median scale
    members = x[typical * g:(typical + 1) * g]
    qmax = int_range(bits)[1]
    levels = torch.arange(-qmax, qmax + 1) * scales[typical]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.1))
    bins = torch.linspace(float(x.min()), float(x.max()), 81).numpy()
    ax1.hist(x.numpy(), bins=bins, color="lightgray", label=f"the row's {K} weights")
    if group_size is not None:
        ax1.hist(members.numpy(), bins=bins, color="tab:blue", alpha=0.9, label=f"group {typical} ({g} weights)")
    top = ax1.get_ylim()[1]
    height = top if bits == 4 else 0.12 * top  # 15 lines can be drawn full height; 255 become ticks
    whose = "the row's" if group_size is None else f"group {typical}'s"
    ax1.vlines(levels.numpy(), 0, height, colors="tab:red", lw=0.6, alpha=0.7,
               label=f"{whose} grid: {2 * qmax + 1} values, step {scales[typical]:.2g}")
    ax1.set_xlabel("weight value")
    ax1.set_ylabel("number of weights")
    ax1.set_title(f"row {row}: values and an int{bits} grid", fontsize=10)
    ax1.legend(fontsize=8, loc="upper left")

    ax2.semilogy(torch.arange(K).numpy(), e.clamp_min(1e-7).numpy(), ".", ms=2.5, color="tab:blue",
                 label="|w - dequantized w|")
    bound = scales.repeat_interleave(g) / 2  # (K,)
    ax2.step(torch.arange(K).numpy(), bound.numpy(), where="post", color="tab:red", lw=1, label="bound: scale / 2")
    if error_ylim is not None:
        ax2.set_ylim(*error_ylim)
    ax2.set_xlabel("position in the row (input feature)")
    ax2.set_ylabel("absolute error")
    ax2.set_title("rounding error of each weight", fontsize=10)
    ax2.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{title}{_setting_name(bits, group_size)}", fontsize=11)
    fig.tight_layout()

    rel = (err.pow(2).mean().sqrt() / w.pow(2).mean().sqrt()).item()
    cost = bits_per_weight(bits, w.shape, gran, group_size)  # code + share of a float16 scale
    caption = (f"<b>{_setting_name(bits, group_size)}</b>: {cost:.2f} bits per weight; whole matrix: RMS error "
               f"{100 * rel:.2f}% of the RMS weight, largest error {err.max().item():.2e}; "
               + (f"row {row} has one grid step, {scales[0]:.2e}." if len(scales) == 1 else
                  f"in row {row} the {len(scales)} groups' grid steps range from {scales.min():.2e} "
                  f"to {scales.max():.2e}."))
    return fig, caption


def grid_slider(w: torch.Tensor, bits_values: Sequence[int] = (8, 4),
                group_values: Sequence[int | None] = (None, 128, 32, 8), row: int | None = None,
                title: str = "", dpi: int = 72) -> widgets.VBox:
    """Two sliders (bits, group size) over precomputed ``grid_frame``s of ``w: (N, K)``.

    Frames sit in one ``Stack`` per bit width inside an outer ``Stack``; the bits slider is ``jslink``ed to the
    outer one and the group slider to every inner one, so both work in the static book.
    """
    bits_values, group_values = list(bits_values), list(group_values)
    if not bits_values or not group_values:
        raise ValueError(f"bits_values and group_values must be non-empty, got {bits_values} and {group_values}")
    w = w.detach().float().cpu()
    row = int(w.abs().amax(dim=1).argmax()) if row is None else row
    worst = max(quantize(w[row:row + 1], b, True, "channel").scale.max().item() for b in bits_values)
    ylim = (1e-7, worst)  # the largest scale / 2, with room above

    def frame(bits, group):
        fig, caption = grid_frame(w, bits, group, row, ylim, title)
        return widgets.VBox([widgets.Image(value=figure_to_png(fig, dpi), format="png"), widgets.HTML(caption)])

    inner = [widgets.Stack([frame(b, g) for g in group_values], selected_index=0) for b in bits_values]
    outer = widgets.Stack(inner, selected_index=0)
    layout = widgets.Layout(width="min(420px, 95%)")
    bits_slider = widgets.SelectionSlider(options=[(str(b), i) for i, b in enumerate(bits_values)], index=0,
                                          description="bits", style=WIDE, layout=layout)
    group_slider = widgets.SelectionSlider(
        options=[("per row" if g is None else str(g), i) for i, g in enumerate(group_values)], index=0,
        description="group size", style=WIDE, layout=layout)
    widgets.jslink((bits_slider, "index"), (outer, "selected_index"))
    for stack in inner:
        widgets.jslink((group_slider, "index"), (stack, "selected_index"))
    return widgets.VBox([widgets.HBox([bits_slider, group_slider]), outer])

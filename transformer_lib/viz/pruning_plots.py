"""Chapter 08's pruning figures: which heads are gone, score heatmaps, and agreement curves with intervals.

Used in chapter 08.

``pruning_frame`` draws one step of a pruning order: the heads' scores as a heatmap with the removed heads
crossed out (left), and the validation loss against the fraction of heads removed with this step marked
(right). ``frame_slider(lambda i: pruning_frame(...), ...)`` turns the steps into a slider. ``score_heatmaps``
draws head scores side by side; ``interval_curves`` draws mean curves with confidence bands (the MiniLM study).
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import torch

from ..utils.checks import check_int, check_sequence, check_tensor, check_type


def pruning_frame(
    scores: torch.Tensor,
    removed: torch.Tensor,
    fractions: Sequence[float],
    losses: Sequence[float],
    index: int,
    base_loss: float,
    order_name: str = "gradient importance",
):
    """One step of a pruning order: ``(figure, caption)``.

    ``scores: (L, H)`` the heads' scores (drawn as the heatmap); ``removed: (L, H)`` bool, True on the heads gone at
    this step; ``fractions``, ``losses``: the whole curve (fraction of heads removed, validation loss) of which
    ``index`` is this step; ``base_loss``: the unpruned model's loss, for the caption.
    """
    check_tensor("scores", scores, ("L", "H"))
    check_tensor("removed", removed, tuple(scores.shape), note="scores' shape (L, H)")
    check_sequence("losses", losses, length=len(fractions), note="one per entry of fractions")
    check_int("index", index, min=0, max=len(losses) - 1, note="this step's place in losses")
    L, H = scores.shape
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(7, 2.7), gridspec_kw={"width_ratios": [1, 1.5]})
    ax1.imshow(scores.detach().float().cpu().numpy(), cmap="Blues", vmin=0, vmax=float(scores.max()))
    for layer, head in removed.nonzero().tolist():
        ax1.plot(head, layer, "x", color="crimson", ms=22, mew=3)
    ax1.set_xticks(range(H))
    ax1.set_yticks(range(L))
    ax1.set_xlabel("head")
    ax1.set_ylabel("layer")
    n_removed = int(removed.sum())
    ax1.set_title(f"{n_removed} of {L * H} heads removed", fontsize=10)
    ax2.plot(fractions, losses, "-", color="C0")
    ax2.plot(fractions[index], losses[index], "o", color="crimson", ms=9)
    ax2.set_xlabel("fraction of heads removed")
    ax2.set_ylabel("validation loss (nats/char)")
    ax2.set_title(f"loss, pruning by {order_name}", fontsize=10)
    fig.tight_layout()
    caption = f"{n_removed} heads removed: validation loss {losses[index]:.3f} (unpruned {base_loss:.3f})"
    return fig, caption


def score_heatmaps(maps: dict, suptitle: str, figsize=(9.6, 3.1), units: dict | None = None):
    """One heatmap per ``(n_layers, n_heads)`` score map of ``maps: {title: tensor}``, side by side; darker =
    larger. ``units: {title: label}`` names each colour bar's unit. Returns the figure."""
    check_int("len(maps)", len(check_type("maps", maps, dict)), min=1, note="one score map at least")
    for title, m in maps.items():
        check_tensor(f"maps[{title!r}]", m, ("n_layers", "n_heads"))
    fig, axes = plt.subplots(1, len(maps), figsize=figsize, squeeze=False)
    for ax, (title, m) in zip(axes[0], maps.items()):
        im = ax.imshow(m.detach().float().cpu().numpy(), cmap="Blues")
        ax.set_xticks(range(m.shape[1]))
        ax.set_yticks(range(m.shape[0]))
        ax.tick_params(labelsize=7)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(title, fontsize=10)
        bar = fig.colorbar(im, ax=ax, shrink=0.8)
        if units and title in units:
            bar.set_label(units[title], fontsize=8)
    fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def interval_curves(
    ns: Sequence[int],
    stats: dict,
    total: int,
    ylabel: str = "agreement with the unpruned model",
    title: str = "Pruning orders, mean and 95% interval over sentence sets",
):
    """Mean curves with shaded intervals: ``stats: {label: [(mean, half_width) for each n of ns]}``; ``total`` heads.

    Each curve starts at 0 heads removed, where a pruned model *is* the unpruned one (agreement 1). Returns the figure.
    """
    for label, rows in stats.items():
        check_sequence(f"stats[{label!r}]", rows, length=len(ns), note="one (mean, half_width) per n of ns")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [0] + list(ns)
    for (label, rows), marker in zip(stats.items(), "os^Dv"):
        mean = [1.0] + [m for m, _ in rows]
        half = [0.0] + [h for _, h in rows]
        (line,) = ax.plot(xs, mean, marker + "-", label=label)
        ax.fill_between(
            xs,
            [m - h for m, h in zip(mean, half)],
            [m + h for m, h in zip(mean, half)],
            color=line.get_color(),
            alpha=0.2,
        )
    ax.set_xlabel(f"heads removed (of {total}), least important first")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig

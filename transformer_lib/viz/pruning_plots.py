"""Chapter 08's pruning-order figure: which heads are gone, and where that model sits on the loss curve.

``pruning_frame`` draws one step of a pruning order: the heads' scores as a heatmap with the removed heads
crossed out (left), and the validation loss against the fraction of heads removed with this step marked
(right). ``frame_slider(lambda i: pruning_frame(...), ...)`` turns the steps into a slider.
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import torch


def pruning_frame(scores: torch.Tensor, removed: torch.Tensor, fractions: Sequence[float], losses: Sequence[float],
                  index: int, base_loss: float, order_name: str = "gradient importance"):
    """One step of a pruning order: ``(figure, caption)``.

    ``scores: (L, H)`` the heads' scores (drawn as the heatmap); ``removed: (L, H)`` bool, True on the heads gone at
    this step; ``fractions``, ``losses``: the whole curve (fraction of heads removed, validation loss) of which
    ``index`` is this step; ``base_loss``: the unpruned model's loss, for the caption.
    """
    if scores.shape != removed.shape or scores.dim() != 2:
        raise ValueError(f"scores and removed must both be (L, H), got {tuple(scores.shape)} and {tuple(removed.shape)}")
    if len(fractions) != len(losses) or not 0 <= index < len(losses):
        raise ValueError(f"fractions ({len(fractions)}) and losses ({len(losses)}) must have the same length, "
                         f"and index={index} must lie in it")
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

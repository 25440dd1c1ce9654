"""Chapter 02's attention figures: a trained head's weights under a softmax temperature.

Used in chapter 02.

A head's weights are ``softmax(q k^T / (sqrt(d_head) tau))``. We take the real ``q`` and ``k`` of one
head of a trained encoder (``head_queries_keys``), recompute the weights with the library's
``attention_weights`` at any temperature ``tau``, and show it as a heatmap with the entropy of every row in
its caption (``temperature_frame``). ``temperature_live_view`` does so for any sentence, layer and head (needs a
kernel); the static book's version is the live figure ``viz.live_attention.AttentionHeatmap``, computed in the browser.
The statistics (entropy in bits, weight on a neighbouring token) live in ``head_stats``.
"""

from __future__ import annotations

import math
from typing import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from ..blocks.attention import attention_weights
from ..analysis.head_stats import entropy_bits
from ..utils.checks import check_int
from .plots import plot_attention
from .widgets import live_view


@torch.no_grad()
def head_queries_keys(model, tokenizer, sentence: str, layer: int, head: int):
    """The real queries and keys of one head of a ``BertEncoder`` on one sentence.

    Returns ``(tokens, q, k)``: ``tokens`` the ``T`` word pieces (with ``[CLS]``/``[SEP]``), ``q, k: (T, d_head)``.
    In a post-norm encoder, layer ``l``'s attention reads ``hidden_states[l]``; its ``project_qkv`` gives
    per-head ``(B, H, T, d_head)``, so ``attention_weights(q, k)`` is exactly that head's map.
    """
    n_layers, n_heads = len(model.layers), model.layers[0].self_attn.n_heads
    check_int("layer", layer, min=0, max=n_layers - 1)
    check_int("head", head, min=0, max=n_heads - 1)
    device = next(model.parameters()).device
    enc = {name: t.to(device) for name, t in tokenizer.encode(sentence).items()}  # each (1, T)
    hidden = model(**enc).hidden_states[layer]  # (1, T, d_model): the input of layer `layer`
    q, k, _ = model.layers[layer].self_attn.project_qkv(hidden)  # each (1, H, T, d_head)
    return tokenizer.tokens(sentence), q[0, head], k[0, head]


def temperature_frame(
    q: torch.Tensor, k: torch.Tensor, tokens: Sequence[str], temperature: float, title: str = "", figsize=(3.9, 3.4)
):
    """One heatmap of ``attention_weights(q, k, temperature=tau)`` and a caption with each row's entropy.

    ``q: (Tq, D)``, ``k: (Tk, D)``. Returns ``(figure, caption_html)`` as ``frame_slider`` expects.
    """
    w = attention_weights(q, k, temperature=temperature).float().cpu()  # (Tq, Tk)
    ent = entropy_bits(w)  # (Tq,)
    fig, ax = plt.subplots(figsize=figsize)
    plot_attention(
        w, list(tokens), list(tokens), ax=ax, title=f"{title} τ = {temperature:g}".strip(), colorbar=False
    )  # the weights are written in the cells; colours share one scale, 0 to 1
    rows = " &middot; ".join(f"{tok}&nbsp;{e:.2f}" for tok, e in zip(tokens, ent.tolist()))
    caption = (
        f"<div style='max-width:520px;font-size:90%'><b>τ = {temperature:g}</b>: mean row entropy "
        f"<b>{ent.mean():.2f} bits</b> (0 = all weight on one key; uniform over {w.shape[-1]} keys = "
        f"{math.log2(w.shape[-1]):.2f} bits)<br>per query row, bits: {rows}</div>"
    )
    return fig, caption


def temperature_live_view(
    model, tokenizer, sentence: str = "The cat sat on the mat", layer: int = 0, head: int = 0
) -> widgets.VBox:
    """Type any sentence, pick any temperature, layer and head (needs a running kernel)."""
    n_layers, n_heads = len(model.layers), model.layers[0].self_attn.n_heads

    def render(sentence, temperature, layer, head):
        tokens, q, k = head_queries_keys(model, tokenizer, sentence, layer, head)
        return temperature_frame(
            q,
            k,
            tokens,
            temperature,
            f"layer {layer}, head {head},",
            figsize=(0.35 * len(tokens) + 2.6, 0.35 * len(tokens) + 1.6),
        )

    slider = dict(continuous_update=False, style={"description_width": "initial"})
    return live_view(
        render,
        sentence=widgets.Text(value=sentence, description="sentence", continuous_update=False),
        temperature=widgets.FloatSlider(value=1.0, min=0.1, max=5.0, step=0.05, description="temperature τ", **slider),
        layer=widgets.IntSlider(value=layer, min=0, max=n_layers - 1, description="layer", **slider),
        head=widgets.IntSlider(value=head, min=0, max=n_heads - 1, description="head", **slider),
    )

"""A decoder's self-attention at inference: the KV cache, rotary positions and a sliding window.

Used in chapter 07.

``CachedSelfAttention`` is ``MultiHeadAttention`` (chapter 03) for a decoder that generates: its ``forward`` takes a
``cache`` (``serving/kv_cache.py``, chapter 07), an object threaded through the layers (as Hugging Face's ``Cache``
in ``modeling_llama.py``) with ``get_seq_length(layer_idx)`` and ``update(k, v, layer_idx) -> (k, v)``; the model
numbers its layers with ``layer_idx``. Two pieces it composes:

* ``rope``: a ``RotaryEmbedding`` (chapter 04) applied to queries and keys, at positions that continue after the
  cached ones;
* ``window``: sliding-window attention (Beltagy et al. 2020, Mistral 7B): with ``is_causal`` each query sees only
  itself and the ``window - 1`` keys before it (``sliding_window_mask``); None = full attention.

With no cache, no ``rope`` and no ``window`` it computes what ``MultiHeadAttention`` computes (``tests/blocks/
test_cached_attention.py``). Grouped queries: ``grouped_query.GroupedQueryAttention``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..utils.checks import check_int, check_tensor, check_type
from .masking import combine_masks
from .multihead import MultiHeadAttention


def sliding_window_mask(t_q: int, t_k: int, window: int, device=None) -> torch.Tensor:
    """Bool ``(t_q, t_k)`` band, True where a query may attend: itself and the ``window - 1`` keys before it.

    Aligned to the end of the keys (query ``i`` is key position ``t_k - t_q + i``, as with a cache), so
    key ``j`` is visible when ``0 <= (t_k - t_q + i) - j < window``: causal and at most ``window`` keys.
    """
    q_pos = torch.arange(t_k - t_q, t_k, device=device)[:, None]  # (t_q, 1)
    distance = q_pos - torch.arange(t_k, device=device)[None, :]  # (t_q, t_k): how far back each key is
    return (distance >= 0) & (distance < window)


def check_window(window) -> None:
    """``window`` is None (full attention) or an int >= 1."""
    check_int("window", window, min=1, note="keys a query sees, itself included", optional="full attention")


class CachedSelfAttention(MultiHeadAttention):
    """Self-attention of a decoder's layer ``layer_idx``, reading and extending a KV cache; optionally rotary
    (``rope``) and windowed (``window``). ``x: (B, T, d_model) -> (B, T, d_model)``."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        rope: nn.Module | None = None,
        layer_idx: int = 0,
        window: int | None = None,
    ):
        check_window(window)
        super().__init__(d_model, n_heads, dropout, bias)
        self.rope, self.layer_idx, self.window = rope, layer_idx, window

    @property
    def n_kv_heads(self) -> int:
        """The key/value heads the cache holds: one per query head (``GroupedQueryAttention`` shares them)."""
        return self.n_heads

    def forward(self, x, *, attn_mask=None, attention_mask=None, is_causal=False, need_weights=False, cache=None):
        """As ``MultiHeadAttention.forward`` for self-attention, over the ``past`` positions in ``cache`` and the
        ``T`` new ones: masks cover ``past + T`` keys (``attention_mask: (B, past + T)``)."""
        check_tensor("x", x, shape=("B", "T", self.d_model), floating=True)
        check_type("cache", cache, methods=("get_seq_length", "update"), expected="a KV cache", optional="no cache")
        past = 0 if cache is None else cache.get_seq_length(self.layer_idx)
        self._check_masks(attn_mask, attention_mask, x.shape[0], x.shape[1], past + x.shape[1])  # before any update
        q, k, v = self.project_qkv(x)  # (B, H, T, d_head)
        if self.rope is not None:  # the new tokens' positions are past .. past + T - 1
            q, k = self.rope(q, offset=past), self.rope(k, offset=past)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)  # (B, H_kv, past + T, d_head)
        if is_causal and self.window is not None:  # the band already holds the causal mask
            band = sliding_window_mask(x.shape[1], k.shape[2], self.window, device=q.device)  # (T, keys held)
            attn_mask, is_causal = combine_masks(attn_mask, band), False
        y, weights = self.attend(q, k, v, self.combined_mask(attn_mask, attention_mask), is_causal, need_weights)
        return self.out(self.merge_heads(y)), weights  # (B, T, d_model)

"""Grouped-query attention (Ainslie et al. 2023; ``n_kv_heads = 1`` is multi-query attention, Shazeer 2019).

Used in chapter 11.

Each group of ``n_heads // n_kv_heads`` query heads shares one key head and one value head, so ``W_K``, ``W_V``
and the KV cache shrink by ``n_heads / n_kv_heads``. ``GroupedQueryAttention`` is ``CachedSelfAttention`` with
those smaller projections; with ``n_kv_heads == n_heads`` it computes what ``MultiHeadAttention`` computes
(``tests/blocks/test_grouped_query.py``).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..utils.checks import check_int
from .cached_attention import CachedSelfAttention


class GroupedQueryAttention(CachedSelfAttention):
    """``CachedSelfAttention`` with ``n_kv_heads`` key/value heads, each serving ``n_heads // n_kv_heads`` query
    heads. ``qkv`` stacks ``W_Q: (d_model, d_model)``, ``W_K, W_V: (n_kv_heads d_head, d_model)``."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        rope: nn.Module | None = None,
        layer_idx: int = 0,
        window: int | None = None,
    ):
        check_int("n_kv_heads", n_kv_heads, min=1)
        note = "n_kv_heads: each key/value head serves n_heads // n_kv_heads query heads"
        check_int("n_heads", n_heads, min=1, multiple_of=n_kv_heads, note=note)
        with torch.device("meta"):  # the full-size projections, replaced below: never allocated nor drawn at random
            super().__init__(d_model, n_heads, dropout, bias, rope, layer_idx, window)
        self.group = n_heads // n_kv_heads  # query heads per key/value head
        self.kv_dim = n_kv_heads * self.d_head
        self.qkv = nn.Linear(d_model, d_model + 2 * self.kv_dim, bias=bias)  # [W_Q; W_K; W_V] stacked
        self.out = nn.Linear(d_model, d_model, bias=bias)  # W_O

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads // self.group

    def project_qkv(self, x: torch.Tensor):
        """Self-attention only: q ``(B, H, T, d_head)``, k and v ``(B, H_kv, T, d_head)``."""
        q, k, v = self.qkv(x).split([self.d_model, self.kv_dim, self.kv_dim], dim=-1)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def attend(self, q, k, v, mask=None, is_causal: bool = False, need_weights: bool = False):
        """Each key/value head serves its group of query heads: ``k, v: (B, H_kv, Tk, d_head) -> (B, H, Tk,
        d_head)``, then ``MultiHeadAttention.attend``."""
        if self.group > 1:
            k, v = k.repeat_interleave(self.group, dim=1), v.repeat_interleave(self.group, dim=1)
        return super().attend(q, k, v, mask, is_causal, need_weights)

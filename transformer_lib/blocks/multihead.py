"""Multi-head attention (Vaswani et al. 2017, section 3.2.2).

Used in chapters 01, 02, 03 and 04.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O,  head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i)

The h projections are one matrix each (``d_model x d_model``) split into h slices of ``d_head``;
the query/key/value weights are stacked in one ``qkv`` Linear laid out like
``nn.MultiheadAttention.in_proj_weight`` so weights load one-to-one.

This is the paper's attention. Later chapters extend it where they teach the extension: a decoder's KV cache, RoPE
and sliding window (``cached_attention.CachedSelfAttention``), grouped queries (``grouped_query``), fewer heads
after pruning (``compression.pruning``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import scaled_dot_product_attention
from ..utils.checks import check_choice, check_equal, check_fields, check_int, check_probability, check_tensor
from .masking import check_mask, combine_masks, key_padding_to_attention


ATTN_MASK_SHAPES = ("(Tq, Tk)", "(1, 1, Tq, Tk)", "(B, 1, Tq, Tk)", "(1, H, Tq, Tk)", "(B, H, Tq, Tk)")
MASK_RANKS = (
    "2 for (Tq, Tk), 4 for (B or 1, H or 1, Tq, Tk); 3 is ambiguous: write mask[:, None] (per sequence) "
    "or mask[None] (per head)"
)


def _check_attn_mask(mask: torch.Tensor, B: int, H: int, Tq: int, Tk: int) -> None:
    """``attn_mask`` is 2-D ``(Tq, Tk)`` or 4-D ``(B or 1, H or 1, Tq, Tk)``, never 3-D (ambiguous)."""
    check_choice(f"attn_mask{tuple(check_tensor('attn_mask', mask).shape)}'s rank", mask.dim(), (2, 4), note=MASK_RANKS)
    check_mask(mask, (B, H, Tq, Tk), "attn_mask")


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with ``n_heads`` heads of size ``d_head = d_model // n_heads``.

    Inputs are batch-first: ``query: (B, Tq, d_model)``, ``key``/``value: (B, Tk, d_model)``.
    Masks use the library convention, True = may attend (see ``masking.py``).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        check_int("d_model", d_model, min=1, multiple_of=check_int("n_heads", n_heads, min=1), note="n_heads")
        check_probability("dropout", dropout)
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)  # [W_Q; W_K; W_V] stacked
        self.out = nn.Linear(d_model, d_model, bias=bias)  # W_O
        self.dropout = dropout

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, H * d_head) -> (B, H, T, d_head)``."""
        B, T, _ = x.shape
        return x.view(B, T, -1, self.d_head).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, H, T, d_head) -> (B, T, H * d_head)``: the Concat of the paper (``H * d_head = d_model``)."""
        B, H, T, D = x.shape
        return x.transpose(1, 2).reshape(B, T, H * D)

    def project_qkv(self, query: torch.Tensor, key: torch.Tensor | None = None, value: torch.Tensor | None = None):
        """Project to per-head q ``(B, H, Tq, d_head)`` and k, v ``(B, H, Tk, d_head)``.

        ``key=None`` means self-attention."""
        if key is None:  # one fused matmul for self-attention
            q, k, v = self.qkv(query).chunk(3, dim=-1)
        else:
            w_q, w_k, w_v = self.qkv.weight.chunk(3)
            b_q, b_k, b_v = (None,) * 3 if self.qkv.bias is None else self.qkv.bias.chunk(3)
            q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def _check_inputs(self, query, key, value):
        """``query: (B, Tq, d_model)``; ``key``, ``value``: both ``(B, Tk, d_model)``, ``key`` alone, or neither."""
        check_tensor("query", query, shape=("B", "Tq", self.d_model), floating=True)
        check_tensor("key", key, shape=(query.shape[0], "Tk", self.d_model), floating=True, optional="self-attention")
        if key is None:
            check_equal("value", value, None, note="self-attention; for cross-attention pass key too")
        check_tensor("value", value, shape=None if key is None else key.shape, floating=True, optional="key's values")

    def _check_masks(self, attn_mask, attention_mask, B: int, Tq: int, Tk: int) -> None:
        """``attn_mask`` one of ``ATTN_MASK_SHAPES``; ``attention_mask`` bool ``(B, Tk)``."""
        if attn_mask is not None:
            _check_attn_mask(attn_mask, B, self.n_heads, Tq, Tk)
        check_tensor("attention_mask", attention_mask, shape=(B, Tk), dtype=torch.bool, optional=True)

    def forward(
        self,
        query,
        key=None,
        value=None,
        attn_mask=None,
        attention_mask=None,
        is_causal: bool = False,
        need_weights: bool = False,
    ):
        """Returns ``(out: (B, Tq, d_model), weights: (B, H, Tq, Tk) or None)``.

        Args:
            key, value: ``(B, Tk, d_model)`` for cross-attention; ``None`` for self-attention.
            attn_mask: bool (True = may attend) or additive float, one of ``ATTN_MASK_SHAPES``: ``(Tq, Tk)``
                (the same for every sequence and head) or 4-D ``(B or 1, H or 1, Tq, Tk)``. A 3-D mask is
                rejected: ``(X, Tq, Tk)`` could be per sequence or per head, which cannot be told apart when
                ``B == H``; write ``mask[:, None]`` (per sequence) or ``mask[None]`` (per head).
            attention_mask: bool ``(B, Tk)``, True on real tokens (Hugging Face's name and meaning; PyTorch's
                ``key_padding_mask`` means the opposite, True = ignore).
            is_causal: add a causal mask aligned to the end of the keys.
            need_weights: take the teaching path and return the per-head weights.
        """
        self._check_inputs(query, key, value)
        value = key if value is None else value
        Tk = (query if key is None else key).shape[1]
        self._check_masks(attn_mask, attention_mask, query.shape[0], query.shape[1], Tk)
        q, k, v = self.project_qkv(query, key, value)  # q: (B, H, Tq, d_head); k, v: (B, H, Tk, d_head)
        y, weights = self.attend(q, k, v, self.combined_mask(attn_mask, attention_mask), is_causal, need_weights)
        return self.out(self.merge_heads(y)), weights  # (B, Tq, d_model)

    @staticmethod
    def combined_mask(attn_mask=None, attention_mask=None):
        """One mask from ``attn_mask`` and the key padding ``attention_mask: (B, Tk)`` (seen as ``(B, 1, 1, Tk)``)."""
        return combine_masks(attn_mask, None if attention_mask is None else key_padding_to_attention(attention_mask))

    def attend(self, q, k, v, mask=None, is_causal: bool = False, need_weights: bool = False):
        """Every head's attention at once: ``q: (B, H, Tq, d_head)``, ``k, v: (B, H, Tk, d_head)`` -> ``(y: (B, H,
        Tq, d_head), weights: (B, H, Tq, Tk) or None)``, with dropout on the weights while training."""
        p = self.dropout if self.training else 0.0
        y = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights, is_causal=is_causal, dropout_p=p)
        return y if need_weights else (y, None)

    @torch.no_grad()
    def load_from_torch(self, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Copy the weights of a ``torch.nn.MultiheadAttention`` with the same d_model and heads (one in_proj
        matrix: ``kdim == vdim == embed_dim``; no ``add_bias_kv``, no ``add_zero_attn``)."""
        plain = dict(_qkv_same_embed_dim=True, bias_k=None, add_zero_attn=False)  # what in_proj/out_proj hold
        check_fields("mha", mha, embed_dim=self.d_model, num_heads=self.n_heads, **plain)
        check_tensor("mha.in_proj_weight", mha.in_proj_weight, shape=tuple(self.qkv.weight.shape), note="this qkv")
        check_equal("mha has biases", mha.in_proj_bias is not None, self.qkv.bias is not None, note="as this module")
        self.qkv.weight.copy_(mha.in_proj_weight)
        self.out.weight.copy_(mha.out_proj.weight)
        if self.qkv.bias is not None:
            self.qkv.bias.copy_(mha.in_proj_bias)
            self.out.bias.copy_(mha.out_proj.bias)
        return self

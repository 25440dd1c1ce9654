"""Chapter 02's check of the 1/sqrt(d_k) argument on a real layer: how large are a freshly initialised
``MultiHeadAttention``'s raw scores q.k, and how many of its softmax rows are nearly one-hot with and without the
scaling?

Used in chapter 02.

* ``score_stats``: measured on a layer's own projections for given token vectors.
* ``init_score_variance``: the closed form for ``nn.Linear``'s default initialisation and unit-variance inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..utils.checks import check_number, check_tensor
from ..blocks.multihead import MultiHeadAttention


@dataclass
class ScoreStats:
    """Scores of every head and query row, unscaled (``q.k``) and scaled (``q.k / sqrt(d_head)``)."""

    d_head: int
    q_var: float  # variance of the query entries
    raw_var: float  # variance of q.k
    scaled_var: float  # variance of q.k / sqrt(d_head)
    one_hot_raw: float  # share of rows whose largest softmax weight is above `threshold`, unscaled
    one_hot_scaled: float  # the same with the scaling
    max_weight_raw: float  # mean of the largest weight per row, unscaled
    max_weight_scaled: float
    n_rows: int


@torch.no_grad()
def score_stats(mha: MultiHeadAttention, x: torch.Tensor, threshold: float = 0.99) -> ScoreStats:
    """Self-attention scores of ``mha`` on ``x: (B, T, d_model)``, pooled over batch, heads and query rows."""
    check_tensor("x", x, ("B", "T", mha.d_model), note=f"(B, T, d_model={mha.d_model})")
    check_number("threshold", threshold, min=0, max=1, min_open=True, max_open=True)
    q, k, _ = mha.project_qkv(x)  # (B, H, T, d_head)
    raw = (q @ k.transpose(-2, -1)).float()  # (B, H, T, T)
    scaled = raw / math.sqrt(mha.d_head)
    top_raw = torch.softmax(raw, -1).amax(-1)  # (B, H, T): the largest weight in each row
    top_scaled = torch.softmax(scaled, -1).amax(-1)
    return ScoreStats(
        d_head=mha.d_head,
        q_var=q.float().var().item(),
        raw_var=raw.var().item(),
        scaled_var=scaled.var().item(),
        one_hot_raw=(top_raw > threshold).float().mean().item(),
        one_hot_scaled=(top_scaled > threshold).float().mean().item(),
        max_weight_raw=top_raw.mean().item(),
        max_weight_scaled=top_scaled.mean().item(),
        n_rows=top_raw.numel(),
    )


def init_score_variance(d_model: int, d_head: int, bias: bool = True) -> float:
    """Var(q.k) for ``nn.Linear``'s default initialisation and inputs of unit variance.

    ``nn.Linear(d_model, .)`` draws weights and biases from U(-b, b) with b = 1/sqrt(d_model), variance b^2/3; so a
    query entry has variance ``d_model * b^2/3 (+ b^2/3 for the bias) = 1/3 (+ 1/(3 d_model))``, and q.k, a sum of
    ``d_head`` products of independent entries, has variance ``d_head * Var(q_i)^2``.
    """
    b2 = 1.0 / d_model
    var_q = d_model * b2 / 3 + (b2 / 3 if bias else 0.0)
    return d_head * var_q**2

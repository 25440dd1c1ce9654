"""Positional information: sinusoidal, learned, rotary (RoPE) and ALiBi.

Used in chapters 04 and 11.

* Sinusoidal (Vaswani et al. 2017, section 3.5): PE[pos, 2i] = sin(pos / 10000^(2i/d)),
  PE[pos, 2i+1] = cos(pos / 10000^(2i/d)); added to the token embeddings.
* Learned absolute (GPT-2, BERT): one trained vector per position; added to the embeddings.
* RoPE (Su et al. 2021, "RoFormer"): rotate each pair of q/k features by pos * theta_i,
  so q_m . k_n depends only on m - n.
* ALiBi (Press et al. 2022, "Train Short, Test Long"): no embedding; add -slope_h * (i - j)
  to head h's attention scores.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..utils.checks import check_dtype, check_int, check_number, check_tensor


def _check_offset(offset) -> None:
    """``offset`` (positions already seen, e.g. a KV cache's length) is an integer >= 0 (not a bool)."""
    check_int("offset", offset, min=0, note="positions already seen")


def _check_base(base) -> None:
    check_number("base", base, min=1, min_open=True, note="the paper's 10000")


def sinusoidal_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The paper's ``(max_len, d_model)`` table; d_model must be even."""
    check_int("max_len", max_len, min=1)
    check_int("d_model", d_model, min=1, multiple_of=2, note="sin and cos come in pairs")
    _check_base(base)
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (T, 1)
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d/2,)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table.float()


def _check_length(t: int, max_len: int, what: str) -> None:
    """``t = offset + T``, the positions ``x`` ends at, fits the table's ``max_len`` rows."""
    check_int("offset + T", t, max=max_len, note=f"the {what} table's max_len: a position past it has no row")


def _check_input(x: torch.Tensor, d_model: int) -> None:
    """``x: (B, T, d_model)``, floating point (an int x would get the table truncated to integers)."""
    check_tensor("x", x, shape=("B", "T", d_model), floating=True, note="B, T, d_model")


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to ``x: (B, T, d_model)``. The table is a (non-trained) buffer."""

    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_input(x, self.pe.shape[1])
        _check_offset(offset)
        _check_length(offset + x.shape[1], self.pe.shape[0], "sinusoidal")
        return x + self.pe[offset : offset + x.shape[1]].to(x.dtype)  # (B, T, d_model)


class LearnedPositionalEmbedding(nn.Module):
    """Adds a trained vector per position to ``x: (B, T, d_model)`` (GPT-2/BERT style)."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        check_int("d_model", d_model, min=1)
        check_int("max_len", max_len, min=1)
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_input(x, self.weight.shape[1])
        _check_offset(offset)
        _check_length(offset + x.shape[1], self.weight.shape[0], "learned positional")
        return x + self.weight[offset : offset + x.shape[1]].to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE: rotates feature pairs (x[2i], x[2i+1]) of ``x: (B, H, T, d_head)`` by angle pos * theta_i.

    theta_i = base^(-2i/d_head). Applied to queries and keys (not values) inside attention; no length limit.
    """

    def __init__(self, d_head: int, base: float = 10000.0):
        super().__init__()
        check_int("d_head", d_head, min=2, multiple_of=2, note="RoPE rotates feature pairs")
        _check_base(base)
        inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float32) / d_head)  # (d_head/2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def angles(self, t: int, offset: int = 0, device=None) -> torch.Tensor:
        _check_offset(offset)
        pos = torch.arange(offset, offset + t, dtype=torch.float32, device=device)
        return pos[:, None] * self.inv_freq.to(device)[None, :]  # (T, d_head/2)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        # rotated in fp32, then cast back: an int x would be truncated
        check_tensor("x", x, shape=(..., "T", 2 * self.inv_freq.shape[0]), floating=True, note="..., T, d_head")
        ang = self.angles(x.shape[-2], offset, x.device)
        cos, sin = ang.cos(), ang.sin()  # (T, d_head/2)
        x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]  # even and odd features
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (..., T, d/2, 2)
        return out.flatten(-2).to(x.dtype)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Head slopes 2^(-8/n), 2^(-16/n), ...; for non-powers of two, the paper's interleaving."""
    check_int("n_heads", n_heads, min=1)

    def pow2(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(pow2(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = pow2(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(pow2(closest) + extra)


def alibi_bias(n_heads: int, t_q: int, t_k: int | None = None, device=None, dtype=torch.float32) -> torch.Tensor:
    """Additive ``(H, Tq, Tk)`` bias: ``-slope_h * (i - j)`` for keys j <= i, queries aligned to the keys' end.

    Future positions (j > i) get 0 here; combine with a causal mask to hide them.
    """
    t_k = t_q if t_k is None else t_k
    check_int("t_q", t_q, min=0)
    check_int("t_k", t_k, min=t_q)
    check_dtype("dtype", dtype, floating=True)  # an integer bias would round every slope to 0
    i = torch.arange(t_k - t_q, t_k, device=device)[:, None]  # query positions (Tq, 1)
    j = torch.arange(t_k, device=device)[None, :]  # key positions (1, Tk)
    distance = (i - j).clamp_min(0).to(dtype)  # (Tq, Tk)
    return -alibi_slopes(n_heads).to(device, dtype)[:, None, None] * distance  # (H, Tq, Tk)

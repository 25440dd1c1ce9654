"""Scaled dot-product attention, the teaching path and the fast path.

Used in chapters 02 and 06.

Vaswani et al. 2017, "Attention Is All You Need", eq. (1):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Shapes follow the book's notation: ``q: (..., Tq, D)``, ``k: (..., Tk, D)``, ``v: (..., Tk, Dv)``;
the leading dimensions are usually ``(B, H)``.

Masks use one convention everywhere in the library: a **boolean** mask is ``True`` where a query
may attend to a key; a **float** mask is added to the scores (0 = keep, very negative = drop).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..utils.checks import broadcast_shape, check_equal, check_number, check_probability, check_tensor
from .masking import causal_mask, check_mask, combine_masks, to_additive, to_boolean


def _check_temperature(temperature: float) -> None:
    check_number(
        "temperature",
        temperature,
        min=0,
        min_open=True,
        note="as T -> 0 the softmax tends to argmax (one-hot); as T -> inf it tends to uniform",
    )


def softmax_with_temperature(scores: torch.Tensor, temperature: float = 1.0, dim: int = -1) -> torch.Tensor:
    """``softmax(scores / T)`` along ``dim``.

    T = 1 is the ordinary softmax. As T -> 0+ the result tends to a one-hot vector at the
    argmax (ties share the mass); as T -> inf it tends to the uniform distribution.
    Rows whose scores are all ``-inf`` (fully masked) give zeros, never NaN; a NaN or ``+inf`` score is refused
    (it would turn its whole row into zeros).
    """
    check_tensor("scores", scores, floating=True, finite=True, allow_neg_inf=True)
    _check_temperature(temperature)
    weights = torch.softmax(scores.float() / temperature, dim=dim)
    return torch.nan_to_num(weights, nan=0.0).to(scores.dtype)


def _shapes(**tensors: torch.Tensor) -> str:
    """``"q(2, 5, 8), k(2, 7, 8)"``: tensors' shapes, for a message."""
    return ", ".join(f"{name}{tuple(x.shape)}" for name, x in tensors.items())


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Shapes and dtypes as the docstring gives them, k's and v's dtype q's; values are not looked at (NaN is the
    model's to report). Every layer calls this: sizes only, broadcast with ``broadcast_shape`` (not torch's)."""
    check_tensor("q", q, shape=(..., "Tq", "D"), floating=True)
    check_tensor("k", k, shape=(..., "Tk", q.shape[-1]), dtype=q.dtype, note="D as q's")
    check_tensor("v", v, shape=(..., k.shape[-2], "Dv"), dtype=q.dtype, note="Tk as k's")
    # the leading dimensions (B, H): as many in each, and sizes that broadcast
    lead = q.dim() == k.dim() == v.dim() and broadcast_shape(q.shape[:-2], k.shape[:-2], v.shape[:-2]) is not None
    ok = "the same number of dimensions, broadcasting"
    check_equal("q, k, v leading dimensions (B, H)", ok if lead else _shapes(q=q, k=k, v=v), ok)


def _scores_shape(q: torch.Tensor, k: torch.Tensor) -> tuple:
    """``(..., Tq, Tk)``: the shape of ``q k^T``."""
    return (*broadcast_shape(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])


def attention_weights(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None, temperature: float = 1.0
) -> torch.Tensor:
    """The attention weights ``softmax(q k^T / (sqrt(D) tau) + mask)``: ``(..., Tq, Tk)``, rows sum to 1.

    The temperature divides the scores only, not the mask (as ``scale`` in ``F.scaled_dot_product_attention``).
    Computed in fp32 and returned in ``q``'s dtype. A fully masked row is all zeros (documented choice:
    that query reads nothing); for a float mask, "masked" means a value below ``finfo.min / 2``. A NaN or inf in ``q``
    or ``k`` is refused (it would make its rows NaN).
    """
    check_tensor("q", q, shape=(..., "Tq", "D"), floating=True, finite=True)
    check_tensor("k", k, shape=(..., "Tk", q.shape[-1]), floating=True, finite=True)
    _check_temperature(temperature)
    scores = q.float() @ k.float().transpose(-2, -1) / (math.sqrt(q.shape[-1]) * temperature)  # (..., Tq, Tk)
    if mask is None:
        return torch.softmax(scores, dim=-1).to(q.dtype)
    check_mask(mask, scores.shape, "mask")
    additive = to_additive(mask, torch.float32).clamp_min(torch.finfo(torch.float32).min)  # no -inf: no NaN
    weights = torch.softmax(scores + additive, dim=-1)
    # exact zeros where masked, and 0 (not a uniform row) on fully masked rows
    return weights.masked_fill(~to_boolean(mask), 0.0).to(q.dtype)


def _causal_fast_path(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether PyTorch's ``is_causal`` kernel can apply the causal mask itself: square scores skip the masked half;
    one query (the newest position, as when decoding) sees every key and needs no mask at all."""
    return q.shape[-2] in (1, k.shape[-2])


def _fit_float_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """An additive mask in ``dtype``, clamped to ``dtype``'s own minimum (``finfo(float32).min`` would overflow to
    ``-inf`` in fp16/bf16, and a row of ``-inf`` gives NaN); a boolean mask or None as it is."""
    if mask is None or mask.dtype == torch.bool:
        return mask
    return mask.float().clamp_min(torch.finfo(dtype).min).to(dtype)


def _zero_fully_masked_rows(out: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Output 0 for a query that may attend to no key: PyTorch's backends differ there (0, NaN or a uniform average)."""
    return out.masked_fill(~to_boolean(mask).any(dim=-1, keepdim=True), 0.0)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    need_weights: bool = False,
    is_causal: bool = False,
    dropout_p: float = 0.0,
):
    """Scaled dot-product attention, ``softmax(q k^T / (sqrt(D) tau) + mask) v``.

    Args:
        q: ``(..., Tq, D)``; k: ``(..., Tk, D)``; v: ``(..., Tk, Dv)``.
        mask: boolean (True = attend) or additive float, broadcastable to ``(..., Tq, Tk)`` by PyTorch's rules
            (trailing dimensions aligned: against ``(B, H, Tq, Tk)`` scores a 3-D mask is read as ``(H, Tq, Tk)``).
        temperature: divides the scaled scores (not the mask); must be > 0 (tau -> 0: argmax, tau -> inf: uniform).
        need_weights: if True, take the explicit teaching path and also return the weights.
        is_causal: add a causal mask aligned to the end of the keys (query i sees keys <= i + Tk - Tq).
        dropout_p: dropout on the attention weights (training only; 0 at inference).

    Returns:
        ``out: (..., Tq, Dv)``, or ``(out, weights)`` with ``weights: (..., Tq, Tk)``.
        A fully masked query row gets weights 0 and output 0 on both paths. NaN or inf in ``q``, ``k`` or ``v`` is
        not looked for (every layer calls this; a diverged run is noticed at its loss): what it gives is the
        backend's. ``need_weights=True`` takes ``attention_weights``, which refuses it.
    """
    _check_qkv(q, k, v)
    _check_temperature(temperature)
    check_probability("dropout_p", dropout_p)
    if mask is not None:
        check_mask(mask, _scores_shape(q, k), "mask")
    scale = 1.0 / (math.sqrt(q.shape[-1]) * temperature)
    if is_causal and mask is None and not need_weights and _causal_fast_path(q, k):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=q.shape[-2] > 1, scale=scale)
    if is_causal:
        mask = combine_masks(mask, causal_mask(q.shape[-2], k.shape[-2], device=q.device))
    if need_weights:  # the teaching path: the weights written out
        weights = attention_weights(q, k, mask, temperature)  # (..., Tq, Tk)
        return F.dropout(weights, dropout_p) @ v, weights
    attn_mask = _fit_float_mask(mask, q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    return out if mask is None else _zero_fully_masked_rows(out, mask)

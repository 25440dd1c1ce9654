"""Masks: causal, padding, their combination, and boolean <-> additive conversion.

Used in chapters 03, 04, 05, 06 and 10.

Convention used everywhere in the library (and by ``F.scaled_dot_product_attention``):
a **boolean** mask is ``True`` where attention is allowed. An **additive** mask is added to the
scores: 0 where allowed and ``torch.finfo(dtype).min`` where not. We never hard-code ``-1e9``:
it overflows to ``-inf`` in fp16 (max 65504) and is not "very negative" enough for large scores.

Note: ``nn.MultiheadAttention`` uses the opposite boolean convention (True = *ignore*);
use ``~mask`` when passing our masks to it.
"""

from __future__ import annotations

import torch

from ..utils.checks import broadcast_shape


def causal_mask(t_q: int, t_k: int | None = None, device=None) -> torch.Tensor:
    """Boolean ``(Tq, Tk)`` mask, True where query i may see key j.

    Queries are aligned to the *end* of the keys, so with a KV cache (Tk > Tq) the last query
    sees every key: ``allowed[i, j] = j <= i + (Tk - Tq)``.
    """
    t_k = t_q if t_k is None else t_k
    for name, value in (("t_q", t_q), ("t_k", t_k)):
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"causal_mask: {name} must be an int, got {type(value).__name__} {value!r}")
    t_q, t_k = int(t_q), int(t_k)
    if t_q < 0 or t_k < t_q:
        raise ValueError(f"causal_mask needs 0 <= t_q <= t_k, got t_q={t_q}, t_k={t_k}")
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Boolean ``(B, T)`` mask from sequence lengths, True on real tokens, False on padding."""
    if not isinstance(lengths, torch.Tensor) or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        got = lengths.dtype if isinstance(lengths, torch.Tensor) else type(lengths).__name__
        raise TypeError(f"lengths must be an integer tensor (B,), got {got}")
    if lengths.dim() != 1 or lengths.numel() == 0:
        raise ValueError(f"lengths must be 1-D (B,), got shape {tuple(lengths.shape)} (B >= 1)")
    if int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got a length of {int(lengths.min())}")
    max_len = int(lengths.max()) if max_len is None else max_len
    if not isinstance(max_len, int) or isinstance(max_len, bool):
        raise TypeError(f"max_len must be an int or None, got {type(max_len).__name__} {max_len!r}")
    if int(lengths.max()) > max_len:
        raise ValueError(f"max_len={max_len} is shorter than the longest length {int(lengths.max())}")
    positions = torch.arange(max_len, device=lengths.device)  # (T,)
    return positions[None, :] < lengths[:, None]  # (B, T)


def padding_mask_from_ids(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Boolean ``(B, T)`` mask, True where ``ids != pad_id``."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        got = f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"ids must be an integer tensor (B, T), got {got}")
    return ids != pad_id


def key_padding_to_attention(key_mask: torch.Tensor) -> torch.Tensor:
    """``(B, Tk)`` key mask -> ``(B, 1, 1, Tk)``, broadcastable over heads and queries."""
    if key_mask.dim() != 2:
        raise ValueError(f"key padding mask must be (B, Tk), got shape {tuple(key_mask.shape)}")
    return key_mask[:, None, None, :]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """AND of boolean masks (or sum of additive ones), broadcasting their shapes. ``None``s are skipped."""
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    if all(m.dtype == torch.bool for m in masks):
        out = masks[0]
        for m in masks[1:]:
            out = out & m
        return out
    dtype = next(m.dtype for m in masks if m.dtype != torch.bool)
    out = to_additive(masks[0], dtype)
    for m in masks[1:]:
        out = out + to_additive(m, dtype)
    return out.clamp_min(torch.finfo(dtype).min)  # two finfo.min summed would give -inf


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Boolean mask -> additive float mask (0 where True, ``finfo(dtype).min`` where False).

    A float mask is returned cast to ``dtype``.
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, torch.finfo(dtype).min)


def to_boolean(mask: torch.Tensor) -> torch.Tensor:
    """Additive float mask -> boolean (True where the added value is above ``finfo.min / 2``)."""
    if mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2


def check_mask(mask: torch.Tensor, scores_shape, name: str = "mask") -> None:
    """Raise ``ValueError`` unless ``mask`` is bool/float and broadcastable to ``scores_shape``."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a bool or float tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise ValueError(f"{name} must be a bool or float tensor, got dtype {mask.dtype}")
    if broadcast_shape(mask.shape, scores_shape) != tuple(scores_shape):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} (..., Tq, Tk)"
        )

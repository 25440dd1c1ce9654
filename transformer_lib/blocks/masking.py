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

from ..utils.checks import check_dtype, check_int, check_tensor


def causal_mask(t_q: int, t_k: int | None = None, device=None) -> torch.Tensor:
    """Boolean ``(Tq, Tk)`` mask, True where query i may see key j.

    Queries are aligned to the *end* of the keys, so when there are more keys than queries (Tk > Tq: the KV cache of
    chapter 07) the last query sees every key: ``allowed[i, j] = j <= i + (Tk - Tq)``.
    """
    t_q = check_int("t_q", t_q, min=0)
    t_k = check_int("t_k", t_q if t_k is None else t_k, min=t_q, note="at least as many keys as queries")
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Boolean ``(B, T)`` mask from sequence lengths, True on real tokens, False on padding."""
    check_tensor("lengths", lengths, shape=(None,), integer=True, min=0, note="B lengths")
    longest = int(lengths.max())
    max_len = check_int("max_len", longest if max_len is None else max_len, min=longest, note="the longest length")
    positions = torch.arange(max_len, device=lengths.device)  # (T,)
    return positions[None, :] < lengths[:, None]  # (B, T)


def padding_mask_from_ids(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Boolean ``(B, T)`` mask, True where ``ids != pad_id``."""
    check_tensor("ids", ids, shape=(None, None), integer=True, note="B, T")
    return ids != pad_id


def key_padding_to_attention(key_mask: torch.Tensor) -> torch.Tensor:
    """``(B, Tk)`` key mask -> ``(B, 1, 1, Tk)``, broadcastable over heads and queries."""
    check_tensor("key_mask", key_mask, shape=(None, None), note="B, Tk")
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
    check_dtype("dtype", dtype, floating=True)
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, torch.finfo(dtype).min)


def to_boolean(mask: torch.Tensor) -> torch.Tensor:
    """Additive float mask -> boolean (True where the added value is above ``finfo.min / 2``)."""
    if mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2


MASK_DTYPES = (torch.bool, torch.float16, torch.bfloat16, torch.float32, torch.float64)  # boolean or additive


def check_mask(mask: torch.Tensor, scores_shape, name: str = "mask") -> None:
    """Raise unless ``mask`` is a bool or float (``MASK_DTYPES``) tensor ``(..., Tq, Tk)`` broadcastable to
    ``scores_shape``: ``TypeError`` for a non-tensor, ``ValueError`` for the rest."""
    check_tensor(name, mask, shape=(..., "Tq", "Tk"), dtype=MASK_DTYPES)  # (Tk,) broadcasts, but SDPA refuses it
    check_tensor(name, mask, broadcasts_to=tuple(scores_shape), note="the scores' (..., Tq, Tk)")

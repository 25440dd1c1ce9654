"""Chapter 05's parameter count: how a layer's parameters split between attention, the feed-forward network (FFN)
and the LayerNorms, for any ``d_model`` and ``d_ff``. The layers are built on PyTorch's ``meta`` device (shapes
only, no memory), so the paper's base model costs nothing to count.

Used in chapter 05.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..blocks.layers import DecoderLayer, EncoderLayer, LayerNorm

KINDS = ("self-attention", "cross-attention", "feed-forward", "LayerNorm")


def _count(module: nn.Module | None) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def layer_parameter_counts(layer: nn.Module) -> dict[str, int]:
    """``{kind: parameters}`` of one ``EncoderLayer`` or ``DecoderLayer`` (``KINDS``; 0 for a kind it lacks)."""
    norms = sum(_count(m) for m in layer.modules() if isinstance(m, (LayerNorm, nn.LayerNorm)))
    return {
        "self-attention": _count(layer.self_attn),
        "cross-attention": _count(getattr(layer, "cross_attn", None)),
        "feed-forward": _count(layer.ffn),
        "LayerNorm": norms,
    }


def parameter_shares(d_model: int, n_heads: int, d_ff: int) -> dict[str, dict[str, int]]:
    """Counts of an encoder layer and a decoder layer (with cross-attention) of the given sizes:
    ``{"encoder layer": {kind: n}, "decoder layer": {kind: n}}``."""
    with torch.device("meta"):
        enc = EncoderLayer(d_model, n_heads, d_ff)
        dec = DecoderLayer(d_model, n_heads, d_ff, cross_attention=True)
    return {"encoder layer": layer_parameter_counts(enc), "decoder layer": layer_parameter_counts(dec)}


def ffn_share(counts: dict[str, int]) -> float:
    """The feed-forward network's fraction of one layer's parameters."""
    return counts["feed-forward"] / sum(counts.values())

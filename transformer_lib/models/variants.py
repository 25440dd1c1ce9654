"""Model variants the chapters build by modifying a trained or fresh model in place.

Used in chapters 05, 06 and 07.

* ``set_norm_placement``: where each ``Residual`` puts its LayerNorm (chapter 05).
* ``set_causal``: a GPT with or without its causal mask (chapter 06's leak test).
"""

from __future__ import annotations

import torch.nn as nn

from ..blocks.layers import Residual
from ..utils.checks import check_bool, check_choice
from .transformer import GPT

PLACEMENTS = ("none", "post", "pre")


def set_norm_placement(model: GPT, placement: str) -> GPT:
    """Rewire every ``Residual`` of ``model`` in place: ``"pre"`` ``x + f(LN(x))`` (the GPT default),
    ``"post"`` ``LN(x + f(x))``, or ``"none"`` ``x + f(x)`` (no LayerNorm anywhere, the final one included)."""
    check_choice("placement", placement, PLACEMENTS)
    for module in model.modules():
        if isinstance(module, Residual):
            module.norm_first = placement != "post"
            if placement == "none":
                module.norm = nn.Identity()
    if placement == "none":
        model.norm = nn.Identity()
    return model


def set_causal(model: GPT, causal: bool) -> GPT:
    """Switch the causal mask of every block of ``model`` off (``causal=False``) or back on, in place.

    Only for experiments: a GPT without its causal mask can read the token it is asked to predict (and cannot
    decode with a KV cache, chapter 07: ``generate`` then needs ``use_cache=False``).
    """
    check_bool("causal", causal)
    for block in model.blocks:
        block.causal = causal  # DecoderLayer.forward reads it
    return model


def is_causal(model: GPT) -> bool:
    """Whether every block of ``model`` applies its causal mask."""
    return all(block.causal for block in model.blocks)

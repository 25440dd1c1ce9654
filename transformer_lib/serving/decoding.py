"""One decoding step: a new token through the model's own forward, reading and extending a KV cache.

Used in chapter 07.

``decode_step(model, token, cache)`` checks its inputs before the cache is touched, then calls
``model(token, cache=cache)`` and returns the last position's logits: there is one forward, the model's, so a hook,
a patched module or a new kind of block decodes exactly as it runs (gpt-fast also decodes through the model's own
forward). Speed comes from the weights' layout in memory instead (``weight_layout.pack_for_decoding``, which
``generate`` applies once per model on a CPU).

``cache_refusal(model)`` says why a model cannot use a cache at all (a non-causal one).
"""

from __future__ import annotations

import torch

from ..utils.checks import check_ids, check_type


def cache_refusal(model) -> str | None:
    """Why ``model`` cannot decode with a KV cache, or None when it can.

    A cache holds each past position's keys and values as they were computed when that position was new.
    That is exact only if no position's output depends on later ones: every block's attention causal.
    """
    for i, block in enumerate(model.blocks):
        if not getattr(block, "causal", False):
            return (
                f"block {i}'s self-attention is not causal (variants.set_causal(model, False)): each past "
                "position would have to see the tokens after it, so its cached keys and values go stale"
            )
    return None


def check_cacheable(model) -> None:
    """Raise ``ValueError`` (saying why, from ``cache_refusal``) unless ``model`` can decode with a KV cache."""
    reason = cache_refusal(model)
    if reason is not None:
        raise ValueError(f"this model cannot decode with a KV cache: {reason}; pass use_cache=False")


@torch.inference_mode()
def decode_step(
    model,
    token: torch.Tensor,
    cache,
    position: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
):
    """One new token through a ``GPT``'s forward, reading and extending ``cache``: logits ``(B, V)``.

    ``token: (B, 1)`` ids; ``position: (B, 1)`` per-row positions for learned/sinusoidal tables (default: the cache
    length); ``attention_mask: (B, past + 1)`` bool. A non-causal model raises ``ValueError`` (``cache_refusal``);
    the model's forward checks the rest at its edge, before any layer touches the cache, so a refused call leaves the
    cache as it was."""
    check_cacheable(model)
    check_ids("token", token, model.cfg.vocab_size, shape=(None, 1))
    check_type("cache", cache, methods=("get_seq_length", "update"), expected="a KV cache (serving.StaticCache, ...)")
    return model(token, cache=cache, attention_mask=attention_mask, position_ids=position)[0][:, -1]

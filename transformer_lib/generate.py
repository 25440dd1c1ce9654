"""Text generation with a decoder-only model: greedy, temperature, top-k and top-p (nucleus) sampling.

With ``use_cache=True`` the prompt is run once (the *prefill*) and each new token then costs one
forward pass over a single position, reading the past keys/values from a cache (``kv_cache.py``).
Without a cache every step recomputes the whole sequence.
"""
from __future__ import annotations

import torch

from .kv_cache import DynamicCache, StaticCache


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Keep the ``top_k`` largest logits and/or the smallest set whose probability reaches ``top_p``.

    ``logits: (B, V)``; removed entries become ``-inf`` (sampling then never picks them).
    """
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cum - sorted_logits.softmax(dim=-1) >= top_p  # mass before this token already >= p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k=None, top_p=None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick one token per row of ``logits: (B, V)``; ``temperature == 0`` means greedy (argmax)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    probs = filter_logits(logits.float() / temperature, top_k, top_p).softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


def _make_cache(kind: str, model, batch: int, max_len: int):
    if kind == "static":
        return StaticCache.for_model(model, batch, max_len)
    if kind == "dynamic":
        return DynamicCache()
    raise ValueError(f"cache must be 'static' or 'dynamic', got {kind!r}")


@torch.inference_mode()
def generate(model, prompt_ids: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, use_cache: bool = True, cache: str = "static", seed: int | None = None,
             attention_mask: torch.Tensor | None = None, return_logits: bool = False):
    """Continue ``prompt_ids: (B, T)`` by ``max_new_tokens`` tokens; returns ``(B, T + max_new_tokens)`` ids.

    Args:
        temperature: 0 = greedy; otherwise divide the logits by it before sampling.
        top_k, top_p: optional filters applied before sampling.
        use_cache: reuse past keys/values (``cache='static'`` preallocated or ``'dynamic'`` concatenating).
        seed: seeds the sampling generator (same seed, same text).
        attention_mask: ``(B, T)`` bool, False on left padding of shorter prompts.
        return_logits: also return the ``(B, max_new_tokens, V)`` logits of every step.

    A prompt longer than the model's context (``block_size``) raises ``ValueError``. Without a cache
    a sequence that outgrows the context is cropped to its last ``block_size`` tokens; with a cache
    ``T + max_new_tokens`` must fit in the context (positions cannot slide under a cache).
    """
    block = model.cfg.block_size
    B, T = prompt_ids.shape
    if T > block:
        raise ValueError(f"prompt length {T} exceeds the model's context block_size={block}")
    if use_cache and T + max_new_tokens > block:
        raise ValueError(f"prompt length {T} + max_new_tokens {max_new_tokens} exceeds block_size={block}, "
                         "which a cache cannot slide past; use fewer tokens or use_cache=False")
    gen = None if seed is None else torch.Generator(device=prompt_ids.device).manual_seed(seed)
    mask = None if attention_mask is None else attention_mask.bool()
    ids, steps = prompt_ids, []
    kv = _make_cache(cache, model, B, T + max_new_tokens) if use_cache else None
    next_input = prompt_ids
    for _ in range(max_new_tokens):
        if use_cache:
            logits, _ = model(next_input, cache=kv, key_padding_mask=mask)
        else:
            window = ids[:, -block:]
            logits, _ = model(window, key_padding_mask=None if mask is None else mask[:, -window.shape[1]:])
        last = logits[:, -1, :]  # (B, V)
        if return_logits:
            steps.append(last.float())
        token = sample_next(last, temperature, top_k, top_p, gen)[:, None]  # (B, 1)
        ids = torch.cat([ids, token], dim=1)
        next_input = token
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(B, 1)], dim=1)
    return (ids, torch.stack(steps, dim=1)) if return_logits else ids

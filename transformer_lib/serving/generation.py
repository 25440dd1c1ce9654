"""Text generation with a decoder-only model: greedy, temperature, top-k and top-p (nucleus) sampling.

Used in chapters 00, 05, 07, 09 and 11.

With ``use_cache=True`` the prompt is run once (the *prefill*) and each new token then costs one
forward pass over a single position, reading the past keys/values from a cache (``kv_cache.py``).
Without a cache every step recomputes the whole sequence.

Every step is the model's own forward, ``model(token, cache=cache)`` (``decoding.decode_step`` is that one step,
checked): one forward for training, prefill and decoding, so whatever the model does (a hook, a patched layer, a new
block) it does while generating. On a CPU ``generate`` first stores the linear weights in the layout a one-token
product reads fastest (``weight_layout.pack_for_decoding``), once per model. A non-causal model cannot use a cache
at all (``cache_refusal``).
"""

from __future__ import annotations

import torch

from ..utils.checks import check_bool, check_choice, check_ids, check_int, check_number, check_tensor
from .decoding import check_cacheable
from .weight_layout import pack_for_decoding
from .kv_cache import DynamicCache, SlidingWindowCache, StaticCache


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    check_number("temperature", temperature, min=0, note="0 = greedy")
    check_int("top_k", top_k, min=1, optional=True)
    check_number("top_p", top_p, 0, 1, min_open=True, optional=True)


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Keep the ``top_k`` largest logits and/or the smallest set of tokens whose probability reaches ``top_p``.

    ``logits: (B, V)``; removed entries become ``-inf`` (sampling then never picks them). Tokens tied with
    the k-th largest are kept. top-p (Holtzman et al. 2020) is applied after top-k, on what top-k kept.
    """
    _check_sampling(1.0, top_k, top_p)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)  # (B, V)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # probability of the better tokens
        drop_sorted = mass_before >= top_p  # the better tokens already reach top_p: drop this one
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick one token per row of ``logits: (B, V)`` -> ``(B,)``; ``temperature == 0`` means greedy (argmax).

    Any ``temperature > 0`` samples ``softmax(logits / temperature)``, computed as ``(logits - max) / temperature``
    (the same distribution: softmax ignores a shift) so that it never overflows: a tiny temperature such as 1e-45,
    whose ``logits / temperature`` is ``inf`` in float32, gives the distribution's limit, the argmax (uniform over
    exactly tied maxima), with no threshold below which it switches to greedy.
    """
    _check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    x = logits.float()
    top = x.amax(dim=-1, keepdim=True)  # (B, 1)
    scaled = torch.where(x == top, 0.0, (x - top) / temperature)  # <= 0; the maxima exactly 0 even if T is 0 in fp32
    probs = filter_logits(scaled, top_k, top_p).softmax(dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


# ----------------------------------------------------------------------------- the loop
CACHE_IMPLEMENTATIONS = ("static", "dynamic", "sliding")


def _make_cache(kind: str, model, batch: int, max_len: int):
    """A new cache of ``kind``, one of ``CACHE_IMPLEMENTATIONS`` (``_check_generate_inputs`` checked it)."""
    return {
        "static": lambda: StaticCache.for_model(model, batch, max_len),
        "dynamic": DynamicCache,
        "sliding": lambda: SlidingWindowCache(model.cfg.window),
    }[kind]()


def _check_sliding(model, attention_mask) -> None:
    """``cache_implementation='sliding'`` needs a windowed model; its cache drops keys that padding masks and ALiBi
    still count."""
    if getattr(model.cfg, "window", None) is None:
        raise ValueError(
            "cache_implementation='sliding' needs a model with sliding-window attention "
            "(GPTConfig.window), got window=None: this model attends to every past key; use "
            "cache_implementation='static' or 'dynamic'"
        )
    if model.cfg.positional == "alibi" or attention_mask is not None:
        raise ValueError(
            f"cache_implementation='sliding' takes no attention_mask and no ALiBi (positional="
            f"{model.cfg.positional!r}, attention_mask given: {attention_mask is not None}); "
            "use cache_implementation='static'"
        )


def _check_generate_inputs(model, prompt_ids, max_new_tokens, use_cache, cache_implementation, attention_mask) -> None:
    block = model.cfg.block_size
    check_ids("prompt_ids", prompt_ids, model.cfg.vocab_size, shape=(None, None))  # (B, T), B and T >= 1
    check_tensor("prompt_ids", prompt_ids, dtype=(torch.long, torch.int))  # the new ids are written in its dtype
    B, T = prompt_ids.shape
    check_int("max_new_tokens", max_new_tokens, min=0)
    check_bool("use_cache", use_cache)
    if use_cache:
        check_cacheable(model)
    check_int("prompt_ids.shape[1]", T, max=block, note=f"prompt length: the model's context block_size={block}")
    if use_cache:  # positions cannot slide past the context with a cache; without one the window slides
        note = f"prompt length {T} + max_new_tokens <= block_size={block}; or use_cache=False"
        check_int("max_new_tokens", max_new_tokens, max=block - T, note=note)
        check_choice("cache_implementation", cache_implementation, CACHE_IMPLEMENTATIONS)
    if use_cache and cache_implementation == "sliding":
        _check_sliding(model, attention_mask)
    check_tensor("attention_mask", attention_mask, shape=(B, T), note="B, T: False on left padding", optional=True)
    if attention_mask is not None:
        m = attention_mask.bool()
        if not m[:, -1].all() or (m[:, 1:].int() < m[:, :-1].int()).any():
            raise ValueError(
                "attention_mask must be left-padded: False only before the first real token of "
                "each row, and every row's last token real"
            )


@torch.inference_mode()
def generate(
    model,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = True,
    cache_implementation: str = "static",
    seed: int | None = None,
    attention_mask: torch.Tensor | None = None,
    return_logits: bool = False,
    pack_weights: bool | None = None,
):
    """Continue ``prompt_ids: (B, T)`` by ``max_new_tokens`` tokens; returns ``(B, T + max_new_tokens)`` ids.

    Args:
        temperature: 0 = greedy; otherwise divide the logits by it before sampling (``sample_next``: any
            positive value, however small, is safe and tends to greedy).
        top_k, top_p: optional filters applied before sampling (``filter_logits``).
        use_cache: reuse past keys/values, in a cache built for this call.
        cache_implementation: which cache (Hugging Face's name for it): ``'static'`` preallocated, ``'dynamic'``
            concatenating or ``'sliding'``, the last ``window`` positions of a sliding-window model
            (``kv_cache.SlidingWindowCache``). ``cache`` elsewhere in the library is a cache object.
        seed: seeds the sampling generator (same seed, same text, with or without a cache).
        attention_mask: ``(B, T)``, False on the left padding of shorter prompts. Each row then gets
            positions counted from its first real token, so it continues exactly as that prompt alone.
        return_logits: also return the ``(B, max_new_tokens, V)`` fp32 logits of every step.
        pack_weights: first store the model's fp32 ``nn.Linear`` weights in the layout a one-token product reads
            fastest (``weight_layout.pack_for_decoding``: in place, same shapes and values, once per model: later
            calls find them packed). Default (None): on a CPU, where it was measured.

    A prompt longer than ``block_size`` raises ``ValueError``. Without a cache a sequence that outgrows the context
    is cropped to its last ``block_size`` tokens; with one ``T + max_new_tokens`` must fit (positions cannot slide).
    Every step runs the model's own forward; a model whose attention is not causal refuses ``use_cache=True``.
    """
    _check_generate_inputs(model, prompt_ids, max_new_tokens, use_cache, cache_implementation, attention_mask)
    _check_sampling(temperature, top_k, top_p)
    pack = prompt_ids.device.type == "cpu" if pack_weights is None else check_bool("pack_weights", pack_weights)
    B, T = prompt_ids.shape
    N, device = max_new_tokens, prompt_ids.device
    gen = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    ids = torch.empty(B, T + N, dtype=prompt_ids.dtype, device=device)  # filled in place: no cat per step
    ids[:, :T] = prompt_ids
    steps = torch.empty(B, N, model.cfg.vocab_size, device=device) if return_logits else None
    mask, positions = _left_padding(attention_mask, B, T, N)
    if N == 0:
        return (ids, steps) if return_logits else ids
    if pack:
        pack_for_decoding(model)  # in place, once per model: nothing to do on later calls
    if use_cache:
        logits, next_logits = _prefill(model, prompt_ids, N, mask, positions, cache_implementation)
    else:
        logits, next_logits = _recompute(model, ids, mask, T), lambda ids, t: _recompute(model, ids, mask, t)
    for i in range(N):
        if return_logits:
            steps[:, i] = logits
        ids[:, T + i] = sample_next(logits, temperature, top_k, top_p, gen)
        if i < N - 1:
            logits = next_logits(ids, T + i + 1)  # (B, V) after the first T + i + 1 tokens
    return (ids, steps) if return_logits else ids


def _left_padding(attention_mask: torch.Tensor | None, B: int, T: int, N: int):
    """``mask: (B, T + N)`` True on real tokens, prompt ``positions: (B, T)`` from each row's first; or None, None."""
    if attention_mask is None or attention_mask.bool().all():
        return None, None
    mask = torch.ones(B, T + N, dtype=torch.bool, device=attention_mask.device)
    mask[:, :T] = attention_mask.bool()
    return mask, (mask[:, :T].long().cumsum(-1) - 1).clamp_min(0)


def _prefill(
    model,
    prompt_ids: torch.Tensor,
    N: int,
    mask,
    positions,
    cache_implementation: str,
):
    """The prompt once into a new cache: its last logits ``(B, V)`` and ``next_logits(ids, t)`` (decode token t-1)."""
    B, T = prompt_ids.shape
    cache = _make_cache(cache_implementation, model, B, T + N)
    logits = model(
        prompt_ids, cache=cache, attention_mask=None if mask is None else mask[:, :T], position_ids=positions
    )[0][:, -1]  # (B, V)
    position = None if positions is None else positions[:, -1:]  # (B, 1): the last prompt token's

    def next_logits(ids: torch.Tensor, t: int) -> torch.Tensor:
        nonlocal position
        token, step_mask = ids[:, t - 1 : t], None if mask is None else mask[:, :t]  # (B, 1), (B, t)
        position = None if position is None else position + 1
        return model(token, cache=cache, attention_mask=step_mask, position_ids=position)[0][:, -1]

    return logits, next_logits


def _recompute(model, ids: torch.Tensor, mask: torch.Tensor | None, t: int) -> torch.Tensor:
    """No cache: run the model on the last ``block_size`` of the first ``t`` tokens; logits of the last ``(B, V)``."""
    start = max(0, t - model.cfg.block_size)
    if mask is None:
        return model(ids[:, start:t])[0][:, -1]
    window = mask[:, start:t]  # (B, <= block)
    positions = (window.long().cumsum(-1) - 1).clamp_min(0)
    return model(ids[:, start:t], attention_mask=window, position_ids=positions)[0][:, -1]

"""Chapter 07's serving measurements: the prefill and the decoding steps timed apart, each beside its roofline.

Used in chapter 07.

Serving a prompt has two phases with different limits (the roofline model, Williams et al. 2009):

* the **prefill** runs the whole prompt, ``T`` positions, through the model in one pass. Every weight is read once
  and used ``T`` times: for ``T`` of a few dozen or more the pass is bound by arithmetic. Its time is the *time to
  first token* (TTFT), and its floor is ``prefill_flops / matmul_flops_per_s``;
* each **decoding step** runs one position per sequence. Every weight is read once and used once: a string of
  matrix-vector products, bound by memory bandwidth. Its time is the *time per output token* (TPOT), and its floor
  is ``(weight bytes + cache bytes) / matvec_bandwidth``.

``prefill`` and ``decode_steps`` are the two phases for any batch (left-padded prompts as ``generate`` takes them);
``time_to_first_token_and_per_token`` and ``cached_forward_times`` time them with ``timing.interleaved_times`` and
return every round's seconds beside the medians, so that a page prints each time with its spread and compares two
with ``timing.ratio_from_times``.
A decoding measurement starts each repetition from the same prefilled ``StaticCache`` (its ``lengths`` are set
back after the steps), so no prefill is inside a decoding time.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import partial

import torch

from ..utils.checks import check_int, check_number, check_sequence, check_tensor
from ..serving.decoding import decode_step
from ..serving.weight_layout import pack_for_decoding
from ..serving.kv_cache import StaticCache, kv_cache_bytes
from ..book_tools.timing import interleaved_medians, interleaved_times


def matrix_weights(cfg) -> int:
    """Weights in the matrix products of a ``GPT`` with config ``cfg``: per layer the q/k/v projection
    (``d x (d + 2 H_kv d_head)``), the output projection and the two feed-forward matrices, plus the head
    (``d x V``, read once even when tied to the embedding). Biases, norms and position tables are left out."""
    d, d_head = cfg.d_model, cfg.d_head
    kv_heads = cfg.n_heads if cfg.n_kv_heads is None else cfg.n_kv_heads
    per_layer = d * (d + 2 * kv_heads * d_head) + d * d + 2 * d * cfg.d_ff  # qkv, out, up, down
    return cfg.n_layers * per_layer + d * cfg.vocab_size


def prefill_flops(cfg, prompt_len: int, batch_size: int = 1) -> int:
    """FLOPs of one forward pass over ``prompt_len`` positions without a cache: ``B (2 N T + 4 L d T^2)``, with
    ``N = matrix_weights(cfg)`` (the head too: logits are computed at every position) and every query-key pair
    counted (the scores and the weighted sum of the values; a causal kernel may skip the masked half)."""
    check_int("prompt_len", prompt_len, min=1)
    check_int("batch_size", batch_size, min=1)
    return batch_size * (2 * matrix_weights(cfg) * prompt_len + 4 * cfg.n_layers * cfg.d_model * prompt_len**2)


def prefill_intensity(cfg, prompt_len: int, bytes_per_element: int = 4) -> float:
    """FLOPs per byte of one sequence's prefill over ``prompt_len`` positions: ``prefill_flops`` over the bytes it
    moves, every matrix weight read once (``matrix_weights``) and the keys and values it writes to the cache."""
    check_int("bytes_per_element", bytes_per_element, min=1)
    kv_heads = cfg.n_heads if cfg.n_kv_heads is None else cfg.n_kv_heads
    kv = kv_cache_bytes(cfg.n_layers, kv_heads, cfg.d_head, prompt_len, 1, bytes_per_element)
    return prefill_flops(cfg, prompt_len) / (matrix_weights(cfg) * bytes_per_element + kv)


def first_size_at_balance(intensity, balance: float, largest: int = 4096) -> int:
    """The smallest size ``n`` in ``1 .. largest`` (a prompt length, a batch size) whose closed-form
    ``intensity(n)`` (FLOPs per byte) reaches ``balance``, the machine's peak FLOP/s over its bandwidth; ``largest +
    1`` when none does. The one rule the book uses for where the roofline model puts the turn."""
    check_int("largest", largest, min=1)
    check_number("balance", balance, min=0, min_open=True, note="the machine's FLOPs per byte")
    return next((n for n in range(1, largest + 1) if intensity(n) >= balance), largest + 1)


def matmul_flops_per_s(n: int = 2048, repeats: int = 5, device=None, dtype=torch.float32) -> float:
    """Measured FLOP/s of an ``(n, n) @ (n, n)`` product (``2 n^3`` FLOPs over the median time): the arithmetic
    ceiling a long prefill meets."""
    check_int("n", n, min=1)
    a = torch.ones(n, n, device=device, dtype=dtype)
    b = torch.ones(n, n, device=device, dtype=dtype)
    seconds = interleaved_medians({"gemm": lambda: a @ b}, repeats=repeats, warmup=1, device=device)["gemm"]
    return 2 * n**3 / seconds


def matvec_bandwidth(n_bytes: int, in_features: int = 768, repeats: int = 5, device=None, dtype=torch.float32) -> float:
    """Measured bytes/s that ``x (1, in) @ W (in, out)`` streams from ``W`` of about ``n_bytes``: the memory ceiling
    a decoding step meets. Size ``W`` like the model's weights, so it is read from where they are (a matrix that
    fits in a CPU's caches reads faster than one that streams from memory); ``in_features``: the model's width."""
    check_int("in_features", in_features, min=1)
    row_bytes = in_features * torch.finfo(dtype).bits // 8  # one row of W's transpose: (in,)
    check_int("n_bytes", n_bytes, min=row_bytes, note=f"one row of in_features={in_features} {dtype} numbers")
    out_features = n_bytes // row_bytes
    w = torch.ones(in_features, out_features, device=device, dtype=dtype)  # (in, out); the values do not matter
    x = torch.ones(1, in_features, device=device, dtype=dtype)
    seconds = interleaved_medians({"matvec": lambda: x @ w}, repeats=repeats, warmup=2, device=device)["matvec"]
    return w.numel() * w.element_size() / seconds


# ----------------------------------------------------------------------------- the two phases
@dataclass
class Prefilled:
    """What a prefill leaves for decoding: the cache, each row's first new token ``(B, 1)``, the prompt length,
    and for left-padded prompts the key mask ``(B, max_len)`` and each row's last position ``(B, 1)``."""

    cache: StaticCache
    token: torch.Tensor
    past: int
    mask: torch.Tensor | None = None
    position: torch.Tensor | None = None


@torch.inference_mode()
def prefill(model, ids: torch.Tensor, max_len: int, attention_mask: torch.Tensor | None = None) -> Prefilled:
    """Run the prompts ``ids: (B, T)`` once into a fresh ``StaticCache`` of ``max_len`` positions; greedy first
    token. ``attention_mask: (B, T)``, False on left padding (each row counts positions from its first real
    token, as ``generate`` does)."""
    check_tensor("ids", ids, ("B", "T"), dtype=torch.long)
    B, T = ids.shape
    check_int("max_len", max_len, min=T + 1)
    mask = position = positions = None
    if attention_mask is not None and not attention_mask.bool().all():
        mask = torch.ones(B, max_len, dtype=torch.bool, device=ids.device)
        mask[:, :T] = attention_mask.bool()
        positions = (mask[:, :T].long().cumsum(-1) - 1).clamp_min(0)  # (B, T)
        position = positions[:, -1:]
    cache = StaticCache.for_model(model, B, max_len)
    logits = model(ids, cache=cache, attention_mask=None if mask is None else mask[:, :T], position_ids=positions)[0][
        :, -1
    ]  # (B, V)
    return Prefilled(cache, logits.argmax(-1, keepdim=True), T, mask, position)


@torch.inference_mode()
def decode_steps(model, state: Prefilled, n: int) -> torch.Tensor:
    """``n`` greedy decoding steps (``decoding.decode_step``) after ``state``; returns the ``(B, n)`` new tokens and
    sets the cache back to the prompt, so the same steps can run again. The timing functions below first pack the
    weights as ``generate`` does (``weight_layout.pack_for_decoding``)."""
    room = state.cache.max_len - state.past  # positions the cache has left after the prompt
    check_int("n", n, min=1, max=room, note=f"steps that fit the cache's max_len={state.cache.max_len}")
    token, out = state.token, []
    for i in range(n):
        t = state.past + i + 1  # keys after this step
        position = None if state.position is None else state.position + i + 1
        mask = None if state.mask is None else state.mask[:, :t]
        logits = decode_step(model, token, state.cache, position=position, attention_mask=mask)  # (B, V)
        token = logits.argmax(-1, keepdim=True)  # (B, 1)
        out.append(token)
    state.cache.crop(state.past)  # forget the steps: the next run repeats them
    return torch.cat(out, dim=1)


# ----------------------------------------------------------------------------- timings
def time_to_first_token_and_per_token(
    model, prompt_lens, n_new: int = 8, repeats: int = 3, seed: int = 0, prefill_repeats: int | None = None
) -> list[dict]:
    """TTFT and TPOT of one sequence for each prompt length, all interleaved (``timing.interleaved_times``).

    A random prompt ``(1, T)`` per length (speed does not depend on which tokens). ``ttft_s``: the median of the
    prefill and its greedy token; ``tpot_s``: of ``n_new`` decoding steps after it, divided by ``n_new``;
    ``ttft_times`` and ``tpot_times``: every round's seconds (round ``r`` of every list measured in the same pass);
    ``context``: the mean number of positions a step attends over; ``prefill_flops``: the closed form of the prefill.
    ``prefill_repeats`` (at most ``repeats``): time the prefills in only that many rounds, the first ones, and the
    decoding steps alone in the rest (a long prefill costs many decoding steps): lists then differ in length, and
    rounds ``0 .. prefill_repeats - 1`` are the paired ones.
    """
    check_sequence("prompt_lens", prompt_lens, min_len=1, items=partial(check_int, min=1))
    check_int("n_new", n_new, min=1)
    check_int("repeats", repeats, min=1)
    prefill_repeats = repeats if prefill_repeats is None else prefill_repeats
    check_int("prefill_repeats", prefill_repeats, min=1, max=repeats, note="the first rounds, at most repeats")
    pack_for_decoding(model)  # the weights' layout generate decodes with (on a CPU; once per model)
    device, g = model.tok_emb.weight.device, torch.Generator().manual_seed(seed)
    fns = {}
    for T in prompt_lens:
        ids = torch.randint(0, model.cfg.vocab_size, (1, T), generator=g).to(device)
        fns[("prefill", T)] = lambda ids=ids, T=T: prefill(model, ids, T + n_new + 1)
        state = prefill(model, ids, T + n_new + 1)
        fns[("decode", T)] = lambda state=state: decode_steps(model, state, n_new)
    for key, fn in fns.items():  # warm-up: the decoding steps once each (making each state ran its prefill once)
        if key[0] == "decode":
            fn()
    times = interleaved_times(fns, repeats=prefill_repeats, warmup=0, device=device)
    if repeats > prefill_repeats:  # the decoding steps alone, for the remaining rounds
        more = interleaved_times(
            {key: fn for key, fn in fns.items() if key[0] == "decode"},
            repeats=repeats - prefill_repeats,
            warmup=0,
            device=device,
        )
        for key, ts in more.items():
            times[key] = times[key] + ts
    rows = []
    for T in prompt_lens:
        ttft, tpot = times[("prefill", T)], [t / n_new for t in times[("decode", T)]]
        rows.append(
            {
                "prompt_len": T,
                "ttft_s": statistics.median(ttft),
                "tpot_s": statistics.median(tpot),
                "ttft_times": ttft,
                "tpot_times": tpot,
                "context": T + (n_new + 1) // 2,
                "prefill_flops": prefill_flops(model.cfg, T),
            }
        )
    return rows


def cached_forward_seconds(model, past: int, ks=(1, 4), repeats: int = 5, seed: int = 0) -> dict[int, float]:
    """Median seconds of one forward pass of ``k`` new positions over a cache of ``past`` positions, for each ``k``
    (interleaved): what verifying ``k`` drafted tokens in one pass costs, against one decoding step (``k = 1``)."""
    times = cached_forward_times(model, past, ks, repeats, seed)
    return {k: statistics.median(ts) for k, ts in times.items()}


def cached_forward_times(model, past: int, ks=(1, 4), repeats: int = 5, seed: int = 0) -> dict[int, list[float]]:
    """Every round's seconds of ``cached_forward_seconds``' passes (round ``r`` of each ``k`` measured in the same
    pass over ``ks``: pairs for ``timing.ratio_from_times``)."""
    check_int("past", past, min=1)
    check_sequence("ks", ks, min_len=1, items=partial(check_int, min=1), note="new positions per forward pass")
    device, g = model.tok_emb.weight.device, torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.cfg.vocab_size, (1, past + max(ks)), generator=g).to(device)
    state = prefill(model, ids[:, :past], past + max(ks))

    @torch.inference_mode()
    def forward(k):
        model(ids[:, past : past + k], cache=state.cache)
        state.cache.crop(past)  # forget the k positions: every round checks the same ones

    return interleaved_times({k: (lambda k=k: forward(k)) for k in ks}, repeats=repeats, warmup=1, device=device)

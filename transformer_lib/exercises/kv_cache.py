"""Chapter 07 exercises: the size of a KV cache, a top-p (nucleus) filter, greedy decoding with a cache, and a
predict-then-run question on the size of a real cache (``explain_cache_prediction``).

Used in chapter 07.

Each ``check_*`` runs the reader's function and the library's on the same random inputs
(``checking.check_against``) and, when they differ, also tries a few common mistakes: if the reader's
function matches one of them, the message says which.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..models.configs import GPTConfig
from ..models.transformer import GPT, init_weights
from ..serving.generation import filter_logits, generate
from ..serving.kv_cache import kv_cache_bytes
from .checking import ExerciseResult, check_against, random_int


# ----------------------------------------------------------------------------- exercise 1
def _bytes_inputs(gen):
    n_heads = [4, 8, 16, 32][random_int(gen, 0, 3)]
    n_kv = [1, 2, n_heads // 2, n_heads][random_int(gen, 0, 3)]
    return (
        random_int(gen, 1, 48),
        n_heads * 16 * random_int(gen, 1, 8),
        n_heads,
        n_kv,
        random_int(gen, 1, 8192),
        random_int(gen, 1, 8),
        [1, 2, 4][random_int(gen, 0, 2)],
    )


def _reference_bytes(n_layers, d_model, n_heads, n_kv_heads, seq_len, batch_size, bytes_per_element):
    return kv_cache_bytes(n_layers, n_kv_heads, d_model // n_heads, seq_len, batch_size, bytes_per_element)


def check_cache_bytes(fn: Callable) -> ExerciseResult:
    """``fn(n_layers, d_model, n_heads, n_kv_heads, seq_len, batch_size, bytes_per_element) -> int``.

    The bytes a KV cache needs for ``batch_size`` sequences of ``seq_len`` tokens: every layer keeps one key
    and one value vector of ``d_head = d_model // n_heads`` numbers for each of its ``n_kv_heads`` key/value heads.
    """

    def variant(**change):
        def wrong(L, d, H, H_kv, T, B, nb):
            v = dict(L=L, d_head=d // H, H_kv=H_kv, T=T, B=B, nb=nb, kv=2) | change
            v = {k: (f(L, d, H, H_kv, T, B, nb) if callable(f) else f) for k, f in v.items()}
            return v["kv"] * v["L"] * v["d_head"] * v["H_kv"] * v["T"] * v["B"] * v["nb"]

        return wrong

    return check_against(
        fn,
        _reference_bytes,
        _bytes_inputs,
        atol=0.0,
        rtol=0.0,
        hints={
            "you counted only the keys (or only the values): the cache holds both, a factor of 2.": variant(kv=1),
            "you used n_heads; only the n_kv_heads key/value heads are cached (grouped-query attention shares them "
            "between query heads).": variant(H_kv=lambda L, d, H, H_kv, T, B, nb: H),
            "you counted numbers, not bytes: multiply by bytes_per_element.": variant(nb=1),
            "each head stores d_head = d_model // n_heads numbers per token, not d_model.": variant(
                d_head=lambda L, d, H, H_kv, T, B, nb: d
            ),
            "the batch is missing: every sequence in the batch has its own cache.": variant(B=1),
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def _top_p_inputs(gen):
    B, V = random_int(gen, 1, 3), random_int(gen, 5, 12)
    return torch.randn(B, V, generator=gen) * 2, float(torch.empty(1).uniform_(0.3, 0.95, generator=gen))


def _probabilities(fn: Callable) -> Callable:
    """Compare filters by the distribution they leave: ``softmax(fn(logits, p))`` (a removed token gets 0)."""

    def call(logits, p):
        out = fn(logits, p)
        return out.float().softmax(-1) if isinstance(out, torch.Tensor) else out  # check_against explains a non-tensor

    return call


def _top_p_variant(keep_crossing=True, unsort=True):
    """Deliberately altered nucleus filters, for hints."""

    def wrong(logits, p):
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        cum = probs.cumsum(-1)
        drop = (cum - probs >= p) if keep_crossing else (cum > p)
        out = sorted_logits.masked_fill(drop, float("-inf"))
        return out.scatter(-1, order, out) if unsort else out

    return wrong


def check_top_p(fn: Callable) -> ExerciseResult:
    """``fn(logits, p) -> filtered``: ``logits: (B, V)``, ``0 < p < 1``; same shape, ``-inf`` on removed tokens.

    Keep, in each row, the most likely tokens until their probabilities add up to at least ``p`` (the
    token that makes the sum reach ``p`` is kept); every other token's logit becomes ``-inf``.
    The check compares ``softmax`` of your result with the library's (``filter_logits(logits, top_p=p)``).
    """
    reader = _probabilities(fn)
    return check_against(
        reader,
        _probabilities(lambda x, p: filter_logits(x, top_p=p)),
        _top_p_inputs,
        hints={
            "you dropped the token whose probability makes the total reach p; keep it: a token goes only when the "
            "tokens ranked above it already reach p (cumsum - prob >= p).": _probabilities(_top_p_variant(False)),
            "your result is in sorted order: scatter the filtered values back to their token ids "
            "(out.scatter(-1, order, sorted_out)).": _probabilities(_top_p_variant(unsort=False)),
            "you returned probabilities; return logits, with -inf where a token is removed.": _probabilities(
                lambda x, p: filter_logits(x, top_p=p).softmax(-1)
            ),
        },
    )


# ----------------------------------------------------------------------------- exercise 3
def exercise_gpt(seed: int = 0) -> GPT:
    """The small random GPT the greedy-decoding check uses (std-0.3 weights: varied, non-repeating text)."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=20, block_size=32, n_layers=2, n_heads=2, d_model=16))
    model.apply(lambda m: init_weights(m, std=0.3))
    return model.eval()


def check_cached_greedy(fn: Callable) -> ExerciseResult:
    """``fn(model, prompt_ids, n_new) -> ids``: greedy decoding of a ``GPT`` with a KV cache.

    ``prompt_ids: (1, T)``; return ``(1, T + n_new)``: the prompt followed by ``n_new`` tokens, each the argmax
    of the logits at the last position. Run the prompt through ``model(prompt_ids, cache=cache)`` once, then
    feed only the newest token each step. The check compares your tokens with ``generate(...,
    use_cache=False)`` and counts the positions your model calls processed.
    """
    model = exercise_gpt()
    processed, worst = [], {}  # positions per model call; the case that processed the most beyond T + n_new
    handle = model.register_forward_pre_hook(
        lambda m, args, kwargs: processed.append((args[0] if args else kwargs["idx"]).shape[1]), with_kwargs=True
    )

    def make_inputs(gen):
        return torch.randint(0, 20, (1, random_int(gen, 2, 6)), generator=gen), random_int(gen, 3, 12)

    def reader(prompt, n):
        processed.clear()
        with torch.no_grad():
            out = fn(model, prompt, n)
        extra = sum(processed) - (prompt.shape[1] + n)
        if extra > worst.get("extra", 0):
            worst.update(extra=extra, T=prompt.shape[1], n=n, total=sum(processed))
        return out

    try:
        result = check_against(reader, lambda prompt, n: generate(model, prompt, n, use_cache=False), make_inputs)
    finally:
        handle.remove()
    if not result and "past=" in result.message:
        return ExerciseResult(
            False,
            result.message + " Hint: the cache already holds the past keys and values: "
            "feed only the newest token, not the whole sequence.",
        )
    if result and worst:
        return ExerciseResult(
            False,
            f"your tokens are right, but for a {worst['T']}-token prompt and {worst['n']} "
            f"new tokens the model processed {worst['total']} positions; with a cache it needs at "
            f"most {worst['T'] + worst['n']}. After the prompt, feed only the newest token "
            "(ids[:, -1:]) with the same cache.",
        )
    return result


# ----------------------------------------------------------------------------- predict, then run
def explain_cache_prediction(
    guess,
    measured: int,
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    seq_len: int,
    bytes_per_element: int,
    variable: str = "my_bytes",
) -> ExerciseResult:
    """Compare the reader's predicted cache size ``guess`` (bytes) with the ``measured`` bytes of a real cache.

    ``measured`` is what the cache's tensors hold (e.g. ``StaticCache.nbytes()``); the other arguments are the
    shape it was built for. When the guess is off by one of the formula's factors
    (``2 * n_layers * n_kv_heads * d_head * seq_len * bytes_per_element``), the message names the factor.
    ``variable``: the name of the notebook variable that holds the guess, named when it holds no number.
    """
    if isinstance(guess, bool) or not isinstance(guess, (int, float)):
        return ExerciseResult(
            False, f"put your prediction (a number of bytes) in the variable `{variable}` first, got {guess!r}."
        )
    formula = (
        f"2 (keys and values) x {n_layers} layers x {n_kv_heads} key/value heads x {d_head} numbers per head "
        f"x {seq_len} positions x {bytes_per_element} bytes = {measured:,} bytes"
    )
    if guess == measured:
        return ExerciseResult(True, f"the cache holds {formula}.")
    factors = {
        "the factor 2: the cache keeps keys AND values": 2,
        f"the {n_layers} layers: every layer keeps its own keys and values": n_layers,
        f"the {n_kv_heads} key/value heads": n_kv_heads,
        f"the {seq_len} positions": seq_len,
        f"the {bytes_per_element} bytes per number (you counted numbers, not bytes)": bytes_per_element,
    }
    for what, f in factors.items():
        if f > 1 and guess * f == measured:
            return ExerciseResult(
                False, f"you guessed {guess:,}, {f}x too few: you left out {what}. The cache holds {formula}."
            )
    for what, f in (
        ("float32 (4 bytes); the cache here is in a 2-byte format", 4 / bytes_per_element),
        (f"d_model = {n_kv_heads * d_head} numbers per head; each head keeps d_head = {d_head}", n_kv_heads),
    ):
        if f > 1 and guess == measured * f:
            return ExerciseResult(
                False, f"you guessed {guess:,}, {f:g}x too many: you counted {what}. The cache holds {formula}."
            )
    return ExerciseResult(
        False, f"you guessed {guess:,}; the cache holds {formula} (your guess is {guess / measured:.3g} times that)."
    )

"""Chapter 07 exercise checks: the right answer passes, common mistakes fail with a hint, stubs are reported."""

import pytest
import torch

from transformer_lib.exercises.kv_cache import (
    check_cache_bytes,
    check_cached_greedy,
    check_top_p,
    explain_cache_prediction,
)
from transformer_lib.serving.kv_cache import DynamicCache, StaticCache


# ----------------------------------------------------------------------------- cache bytes
def cache_bytes(n_layers, d_model, n_heads, n_kv_heads, seq_len, batch_size, bytes_per_element):
    return 2 * n_layers * batch_size * n_kv_heads * (d_model // n_heads) * seq_len * bytes_per_element


def test_cache_bytes_solution_passes():
    assert check_cache_bytes(cache_bytes)


def test_cache_bytes_solution_agrees_with_a_real_cache():
    # independent of the library's formula: count the bytes of K and V tensors actually built
    L, d, H, H_kv, T, B = 3, 64, 8, 2, 10, 2
    cache = DynamicCache()
    for layer in range(L):
        cache.update(torch.zeros(B, H_kv, T, d // H), torch.zeros(B, H_kv, T, d // H), layer)
    assert cache.nbytes() == cache_bytes(L, d, H, H_kv, T, B, 4)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda L, d, H, Hkv, T, B, nb: L * B * Hkv * (d // H) * T * nb, "only the keys"),
        (lambda L, d, H, Hkv, T, B, nb: 2 * L * B * H * (d // H) * T * nb, "n_kv_heads"),
        (lambda L, d, H, Hkv, T, B, nb: 2 * L * B * Hkv * (d // H) * T, "bytes_per_element"),
        (lambda L, d, H, Hkv, T, B, nb: 2 * L * B * Hkv * d * T * nb, "d_head = d_model // n_heads"),
        (lambda L, d, H, Hkv, T, B, nb: 2 * L * Hkv * (d // H) * T * nb, "batch"),
    ],
)
def test_cache_bytes_common_mistakes_get_their_hint(wrong, hint):
    result = check_cache_bytes(wrong)
    assert not result and hint in result.message


def test_cache_bytes_wrong_type_is_explained():
    result = check_cache_bytes(lambda *a: "many")
    assert not result and "returned a str, expected a number" in result.message, result.message


# ----------------------------------------------------------------------------- top-p
def top_p(logits, p):
    probs, order = logits.softmax(-1).sort(descending=True, dim=-1)
    drop_sorted = probs.cumsum(-1) - probs >= p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def test_top_p_solution_passes():
    assert check_top_p(top_p)


def test_top_p_solution_on_a_closed_form_case():
    probs = torch.tensor([[0.1, 0.6, 0.3]])
    kept = torch.isfinite(top_p(probs.log(), 0.7))[0].tolist()
    assert kept == [False, True, True]  # 0.6 < 0.7, so 0.3 is needed; 0.6 + 0.3 >= 0.7, so 0.1 goes


def _sorted_wrong(keep_crossing, unsort):
    def wrong(logits, p):
        s, order = logits.sort(descending=True, dim=-1)
        probs = s.softmax(-1)
        drop = (probs.cumsum(-1) - probs >= p) if keep_crossing else (probs.cumsum(-1) > p)
        out = s.masked_fill(drop, float("-inf"))
        return out.scatter(-1, order, out) if unsort else out

    return wrong


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (_sorted_wrong(False, True), "makes the total reach p"),
        (_sorted_wrong(True, False), "sorted order"),
        (lambda x, p: top_p(x, p).softmax(-1), "you returned probabilities"),
    ],
)
def test_top_p_common_mistakes_get_their_hint(wrong, hint):
    result = check_top_p(wrong)
    assert not result and hint in result.message


# ----------------------------------------------------------------------------- cached greedy decoding
def greedy_with_cache(model, prompt_ids, n_new):
    cache = DynamicCache()
    logits, _ = model(prompt_ids, cache=cache)  # the prompt, once
    ids = prompt_ids
    for _ in range(n_new):
        token = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
        ids = torch.cat([ids, token], dim=1)
        logits, _ = model(token, cache=cache)  # only the newest token
    return ids


def greedy_without_cache(model, prompt_ids, n_new):
    ids = prompt_ids
    for _ in range(n_new):
        ids = torch.cat([ids, model(ids)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def whole_sequence_with_cache(model, prompt_ids, n_new):
    cache, ids = DynamicCache(), prompt_ids
    for _ in range(n_new):
        ids = torch.cat([ids, model(ids, cache=cache)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def test_cached_greedy_solution_passes():
    result = check_cached_greedy(greedy_with_cache)
    assert result, result.message


def test_recomputing_without_a_cache_gets_the_right_tokens_but_fails():
    result = check_cached_greedy(greedy_without_cache)
    assert not result and "your tokens are right" in result.message and "newest token" in result.message


def test_feeding_the_whole_sequence_to_the_cache_gets_a_hint():
    result = check_cached_greedy(whole_sequence_with_cache)
    assert not result and "feed only the newest token" in result.message


@pytest.mark.parametrize("check, nargs", [(check_cache_bytes, 7), (check_top_p, 2), (check_cached_greedy, 3)])
def test_stubs_are_reported_not_raised(check, nargs):
    def stub(*args):
        assert len(args) == nargs
        raise NotImplementedError

    result = check(stub)
    assert not result and "not written yet" in result.message


# ----------------------------------------------------------------------------- predict, then run: a cache's bytes
def real_bf16_cache(L=2, H_kv=4, T=16, d_head=8):
    """A StaticCache's measured bytes, and the same count from bare tensors (independent of kv_cache_bytes)."""
    cache = StaticCache(L, 1, H_kv, T, d_head, dtype=torch.bfloat16)
    bare = sum(2 * torch.zeros(1, H_kv, T, d_head, dtype=torch.bfloat16).nbytes for _ in range(L))  # K and V
    return cache.nbytes(), bare, (L, H_kv, d_head, T)


def test_cache_prediction_right_answer_passes():
    measured, bare, (L, H_kv, d_head, T) = real_bf16_cache()
    assert measured == bare
    result = explain_cache_prediction(bare, measured, L, H_kv, d_head, T, bytes_per_element=2)
    assert result and f"{bare:,} bytes" in result.message


@pytest.mark.parametrize("factor, words", [(0.5, "keys AND values"), (0.5 / 2, None), (2.0, "float32")])
def test_cache_prediction_explains_a_wrong_guess(factor, words):
    measured, bare, (L, H_kv, d_head, T) = real_bf16_cache()
    result = explain_cache_prediction(int(bare * factor), measured, L, H_kv, d_head, T, bytes_per_element=2)
    assert not result and f"{bare:,} bytes" in result.message
    if words:
        assert words in result.message


def test_cache_prediction_rejects_a_non_number():
    measured, bare, (L, H_kv, d_head, T) = real_bf16_cache()
    result = explain_cache_prediction("lots", measured, L, H_kv, d_head, T, bytes_per_element=2)
    assert not result and "a number" in result.message and "`my_bytes`" in result.message

"""KV caches: both caches return exactly the concatenation of what was written, a static cache refuses to overflow,
and the bytes their tensors' storages occupy equal the closed form 2 x layers x B x kv_heads x d_head x T x bytes."""

import pytest
import torch

from transformer_lib.serving.kv_cache import DynamicCache, StaticCache, human_bytes, kv_cache_bytes
from transformer_lib.models.configs import GPTConfig
from transformer_lib.models.transformer import GPT

B, H_KV, D, L = 2, 3, 4, 2
CHUNKS = (5, 1, 2, 1)  # a prompt of 5, then new tokens


def chunks(seed=0):
    """The (k, v) pairs written per layer, chunk by chunk: each (B, H_kv, t, d_head)."""
    g = torch.Generator().manual_seed(seed)
    return [
        [(torch.randn(B, H_KV, t, D, generator=g), torch.randn(B, H_KV, t, D, generator=g)) for _ in range(L)]
        for t in CHUNKS
    ]


@pytest.mark.parametrize(
    "make", [DynamicCache, lambda: StaticCache(L, B, H_KV, sum(CHUNKS), D)], ids=["dynamic", "static"]
)
def test_cache_returns_the_concatenation_of_every_update(make):
    cache, seen = make(), chunks()
    for step, per_layer in enumerate(seen):
        for layer, (k, v) in enumerate(per_layer):
            got_k, got_v = cache.update(k, v, layer)
            want_k = torch.cat([seen[s][layer][0] for s in range(step + 1)], dim=2)
            want_v = torch.cat([seen[s][layer][1] for s in range(step + 1)], dim=2)
            assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
        assert [cache.get_seq_length(i) for i in range(L)] == [sum(CHUNKS[: step + 1])] * L


def test_static_cache_overflow_raises():
    cache = StaticCache(1, 1, 2, max_len=4, d_head=3)
    cache.update(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3), 0)
    with pytest.raises(
        ValueError, match=r"k.shape\[-2\] must be an int <= 1 \(new positions; 3 of max_len=4 held\), got 2"
    ):
        cache.update(torch.zeros(1, 2, 2, 3), torch.zeros(1, 2, 2, 3), 0)
    assert cache.get_seq_length(0) == 3  # the failed update wrote nothing


def test_static_cache_rejects_keys_of_the_wrong_shape():
    cache = StaticCache(1, 2, 2, max_len=4, d_head=3)
    with pytest.raises(
        ValueError,
        match=r"k must be a tensor of shape \(2, 2, any, 3\) \(layer 0's \(B, H_kv, T, d_head\).*, got \(2, 1, 1, 3\)",
    ):
        cache.update(torch.zeros(2, 1, 1, 3), torch.zeros(2, 1, 1, 3), 0)


def test_dynamic_cache_rejects_a_skipped_layer():
    with pytest.raises(ValueError, match=r"layer_idx must be an int in \[0, 0\] \(no layer skipped: 0 held\), got 1"):
        DynamicCache().update(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2), 1)


def storage_bytes(cache) -> int:
    """Bytes of memory the cache's tensors occupy, read from their storages (not from numel x element_size)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in cache.keys + cache.values}
    return sum(storages.values())


@pytest.mark.parametrize("dtype, nbytes", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_cache_bytes_equal_the_closed_form(dtype, nbytes):
    T, max_len = sum(CHUNKS), 16
    dynamic, static = DynamicCache(), StaticCache(L, B, H_KV, max_len, D, dtype=dtype)
    for per_layer in chunks():
        for layer, (k, v) in enumerate(per_layer):
            dynamic.update(k.to(dtype), v.to(dtype), layer)
            static.update(k.to(dtype), v.to(dtype), layer)
    assert storage_bytes(dynamic) == dynamic.nbytes() == kv_cache_bytes(L, H_KV, D, T, B, nbytes)  # what was written
    assert storage_bytes(static) == static.nbytes() == kv_cache_bytes(L, H_KV, D, max_len, B, nbytes)  # every slot


def test_known_model_shapes():
    # LLaMA-7B (32 layers, 32 heads of 128) in fp16: 0.5 MiB per token, 2 GiB at its 4096-token context.
    assert kv_cache_bytes(32, 32, 128, 1) == 2**19
    assert kv_cache_bytes(32, 32, 128, 4096) == 2**31
    # grouped-query attention shrinks the cache by n_heads / n_kv_heads (Llama-2-70B: 64 query, 8 kv heads)
    assert kv_cache_bytes(80, 64, 128, 4096) == 8 * kv_cache_bytes(80, 8, 128, 4096)


@pytest.mark.parametrize(
    "bad, error",
    [(dict(n_layers=-1), ValueError), (dict(seq_len=2.5), TypeError), (dict(bytes_per_element="2"), TypeError)],
)
def test_kv_cache_bytes_rejects_bad_sizes(bad, error):
    args = dict(n_layers=2, n_kv_heads=2, d_head=4, seq_len=8, batch_size=1, bytes_per_element=2) | bad
    name = next(iter(bad))
    with pytest.raises(error, match=rf"{name} must be an int >= 0, got"):
        kv_cache_bytes(**args)


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_static_cache_for_model_matches_the_model_and_a_filled_dynamic_cache(n_kv_heads):
    model = GPT(GPTConfig(vocab_size=11, block_size=12, n_layers=2, n_heads=4, d_model=16, n_kv_heads=n_kv_heads))
    static = StaticCache.for_model(model, batch_size=3)
    dynamic = DynamicCache()
    with torch.no_grad():
        model(torch.zeros(3, 12, dtype=torch.long), cache=dynamic)
    assert [k.shape for k in static.keys] == [k.shape for k in dynamic.keys] == [(3, n_kv_heads or 4, 12, 4)] * 2
    # a GPT's filled cache holds exactly the closed form's bytes: 2 (K, V) x 2 layers x B 3 x kv heads x d_head 4
    # x 12 positions x 4 (fp32)
    assert storage_bytes(dynamic) == storage_bytes(static) == kv_cache_bytes(2, n_kv_heads or 4, 4, 12, 3, 4)


def test_static_cache_allows_one_size_per_layer():
    cache = StaticCache(2, 1, [4, 2], max_len=5, d_head=[8, 6])
    assert [k.shape for k in cache.keys] == [(1, 4, 5, 8), (1, 2, 5, 6)]
    with pytest.raises(ValueError, match=r"n_kv_heads must hold exactly 2 item\(s\) \(one per layer\), got 1"):
        StaticCache(2, 1, [4], max_len=5, d_head=8)


# ----------------------------------------------------------------------------- StaticCache.crop (HF's Cache.crop)
def _gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=29, block_size=32, n_layers=2, n_heads=2, d_model=16)).eval()


@pytest.mark.parametrize("length", [7, -5])
def test_a_cropped_cache_decodes_what_a_cache_prefilled_with_the_kept_tokens_decodes(length):
    # crop(7) and crop(-5) of 12 cached tokens both keep the first 7: the next token must then get the logits a
    # fresh cache gives after a prefill of those 7 (to rounding: one prefill vs a prefill and decoding steps)
    model, ids = _gpt(), torch.randint(0, 29, (2, 13), generator=torch.Generator().manual_seed(1))
    cache = StaticCache.for_model(model, 2)
    with torch.no_grad():
        model(ids[:, :9], cache=cache)
        for t in range(9, 12):
            model(ids[:, t : t + 1], cache=cache)  # 12 positions now
        kept_k = [k[:, :, :7].clone() for k in cache.keys]
        cache.crop(length)
        assert [cache.get_seq_length(i) for i in range(2)] == [7, 7]
        assert all(torch.equal(k[:, :, :7], want) for k, want in zip(cache.keys, kept_k))  # the kept part untouched
        nxt = torch.tensor([[3], [11]])
        got = model(nxt, cache=cache)[0][:, -1]
        fresh = StaticCache.for_model(model, 2)
        model(ids[:, :7], cache=fresh)
        want = model(nxt, cache=fresh)[0][:, -1]
        uncached = model(torch.cat([ids[:, :7], nxt], dim=1))[0][:, -1]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, uncached, rtol=1e-5, atol=1e-5)
    assert cache.get_seq_length(0) == 8


def test_crop_past_the_length_keeps_everything_and_bad_lengths_are_refused():
    cache = StaticCache(L, B, H_KV, 10, D)
    for layer in range(L):
        cache.update(torch.ones(B, H_KV, 4, D), torch.ones(B, H_KV, 4, D), layer)
    cache.crop(9)  # longer than what is held: nothing to forget (as in Hugging Face's crop)
    assert cache.lengths == [4, 4]
    for bad, error, match in (
        (
            -5,
            ValueError,
            r"length must be an int >= -4 \(positions to keep; negative: to remove, of the 4 held\), got -5",
        ),
        (
            2.0,
            TypeError,
            r"length must be an int >= -4 \(positions to keep; negative: to remove, of the 4 held\), got float 2.0",
        ),
        (
            True,
            TypeError,
            r"length must be an int >= -4 \(positions to keep; negative: to remove, of the 4 held\), got bool True",
        ),
    ):
        with pytest.raises(error, match=match):
            cache.crop(bad)
    assert cache.lengths == [4, 4]  # a refused crop changed nothing
    cache.crop(0)
    assert cache.lengths == [0, 0]


# ----------------------------------------------------------------------------- human_bytes (kvcache.js's twin)
# Written out by hand from the rule (binary units, one decimal, a tie rounded away from zero); the browser test in
# test_live_widgets.py checks kvcache.js's human() against the same table.
HUMAN_BYTES = [
    (0, "0.0 B"),
    (1, "1.0 B"),
    (1023, "1,023.0 B"),
    (1024, "1.0 KiB"),
    (1280, "1.3 KiB"),
    (1536, "1.5 KiB"),
    (1048575, "1,024.0 KiB"),
    (3 * 2**19, "1.5 MiB"),
    (37748736, "36.0 MiB"),
    (10**12, "931.3 GiB"),
    (3 * 2**40, "3,072.0 GiB"),
    (0.5, "0.5 B"),
    (2**30 * 1.25, "1.3 GiB"),
]


@pytest.mark.parametrize("n, text", HUMAN_BYTES)
def test_human_bytes_prints_binary_units_as_the_calculator_does(n, text):
    assert human_bytes(n) == text


@pytest.mark.parametrize(
    "bad, error",
    [(-1, ValueError), (float("nan"), ValueError), (float("inf"), ValueError), ("1024", TypeError), (True, TypeError)]
    + [(None, TypeError)],
)
def test_human_bytes_refuses_what_is_not_a_finite_count(bad, error):
    with pytest.raises(error, match=r"n must be a finite number >= 0 \(bytes\), got"):
        human_bytes(bad)


# ----------------------------------------------------------------------------- a refused update writes nothing
def _state(cache):
    return [cache.get_seq_length(i) for i in range(L)], [t.clone() for t in cache.keys + cache.values]


def _assert_state(cache, state):
    lengths, tensors = state
    assert [cache.get_seq_length(i) for i in range(L)] == lengths
    assert all(torch.equal(a, b) for a, b in zip(cache.keys + cache.values, tensors, strict=True))


MAKERS = [DynamicCache, lambda: StaticCache(L, B, H_KV, sum(CHUNKS), D)]


@pytest.mark.parametrize("make", MAKERS, ids=["dynamic", "static"])
def test_values_of_the_wrong_size_are_refused_before_the_keys_are_written(make):
    cache, first = make(), chunks()[0]
    for layer, (k, v) in enumerate(first):
        cache.update(k, v, layer)
    state = _state(cache)
    k, v = torch.randn(B, H_KV, 1, D), torch.randn(B, H_KV, 1, D + 1)
    with pytest.raises(
        ValueError, match=r"v must be a tensor of shape \(2, 3, any, 4\) \(layer 0's .*\), got \(2, 3, 1, 5\)"
    ):
        cache.update(k, v, 0)
    with pytest.raises(
        ValueError, match=r"v must be a tensor of shape \(2, 3, 1, any\) \(k's \(B, H_kv, T_new\)\), got \(2, 3, 2, 4\)"
    ):
        cache.update(k, torch.randn(B, H_KV, 2, D), 0)
    _assert_state(cache, state)
    got_k, got_v = cache.update(k, v[..., :D], 0)  # the corrected retry
    assert torch.equal(got_k, torch.cat([first[0][0], k], dim=2)) and torch.equal(got_v[:, :, -1:], v[..., :D])


def test_dynamic_cache_refuses_values_of_a_new_size_on_a_layer_s_first_update():
    cache = DynamicCache()
    with pytest.raises(ValueError, match=r"v must be a tensor of shape \(2, 3, 2, any\) \(k's \(B, H_kv, T_new\)\)"):
        cache.update(torch.randn(B, H_KV, 2, D), torch.randn(B + 1, H_KV, 2, D), 0)
    assert cache.keys == [] and cache.values == []


@pytest.mark.parametrize("make", MAKERS, ids=["dynamic", "static"])
def test_a_new_batch_size_is_refused_before_anything_is_written(make):
    cache, first = make(), chunks()[0]
    for layer, (k, v) in enumerate(first):
        cache.update(k, v, layer)
    state = _state(cache)
    k = torch.randn(B + 1, H_KV, 1, D)
    for layer in range(L):
        with pytest.raises(
            ValueError, match=rf"k must be a tensor of shape \(2, 3, any, 4\) \(layer {layer}'s .*\), got \(3,"
        ):
            cache.update(k, k, layer)
    _assert_state(cache, state)
    cache.update(k[:B], k[:B], 0)
    assert cache.get_seq_length(0) == CHUNKS[0] + 1

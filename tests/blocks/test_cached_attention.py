"""The decoder's attention variants (``CachedSelfAttention``, ``GroupedQueryAttention``) against the paper's
``MultiHeadAttention`` on the same weights, and cached decoding against recomputing the whole sequence."""

import pytest
import torch

from transformer_lib.blocks.cached_attention import CachedSelfAttention, sliding_window_mask
from transformer_lib.blocks.grouped_query import GroupedQueryAttention
from transformer_lib.blocks.masking import causal_mask
from transformer_lib.blocks.multihead import MultiHeadAttention
from transformer_lib.blocks.positional import RotaryEmbedding

B, T, D, H = 2, 7, 16, 4
ATOL = 1e-5


def inputs(t=T, seed=1):
    return torch.randn(B, t, D, generator=torch.Generator().manual_seed(seed))


def plain_twin(attn: torch.nn.Module) -> MultiHeadAttention:
    """A ``MultiHeadAttention`` holding ``attn``'s weights (its ``qkv`` and ``out``)."""
    plain = MultiHeadAttention(attn.d_model, attn.n_heads, attn.dropout, bias=attn.qkv.bias is not None)
    plain.load_state_dict(attn.state_dict(), strict=False)
    return plain.train(attn.training)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_cached_attention_without_its_extras_equals_multi_head_attention(is_causal, need_weights):
    torch.manual_seed(0)
    cached = CachedSelfAttention(D, H, layer_idx=3).eval()
    plain = plain_twin(cached).eval()
    x, pad = inputs(), torch.tensor([[True] * T, [True] * (T - 2) + [False] * 2])
    got = cached(x, attention_mask=pad, is_causal=is_causal, need_weights=need_weights)
    want = plain(x, attention_mask=pad, is_causal=is_causal, need_weights=need_weights)
    torch.testing.assert_close(got[0], want[0], atol=0, rtol=0)
    if need_weights:
        torch.testing.assert_close(got[1], want[1], atol=0, rtol=0)


def test_cached_attention_state_dict_has_the_paper_names():
    assert list(CachedSelfAttention(D, H).state_dict()) == list(MultiHeadAttention(D, H).state_dict())
    assert list(GroupedQueryAttention(D, H, 2).state_dict()) == ["qkv.weight", "qkv.bias", "out.weight", "out.bias"]


def test_cached_attention_in_training_mode_drops_out_as_multi_head_attention_does():
    cached = CachedSelfAttention(D, H, dropout=0.3).train()
    plain = plain_twin(cached)
    x = inputs()
    torch.manual_seed(5)
    got = cached(x, is_causal=True)[0]
    torch.manual_seed(5)
    torch.testing.assert_close(got, plain(x, is_causal=True)[0], atol=0, rtol=0)


@pytest.mark.parametrize("rope", [False, True])
def test_cached_decoding_matches_full_recompute(rope, make_cache):
    torch.manual_seed(0)
    mha = CachedSelfAttention(D, H, rope=RotaryEmbedding(D // H) if rope else None).eval()
    x = inputs()
    full, _ = mha(x, is_causal=True)
    cache, steps = make_cache(), []
    for chunk in (x[:, :3], x[:, 3:4], x[:, 4:6], x[:, 6:]):  # a prompt, then one or two tokens at a time
        steps.append(mha(chunk, is_causal=True, cache=cache)[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=ATOL)
    assert cache.get_seq_length(0) == 7


def test_rope_rotates_queries_and_keys_before_the_paper_attention():
    torch.manual_seed(0)
    rope = RotaryEmbedding(D // H)
    cached = CachedSelfAttention(D, H, rope=rope).eval()
    plain = plain_twin(cached).eval()
    x = inputs()
    q, k, v = plain.project_qkv(x)
    y, _ = plain.attend(rope(q), rope(k), v, is_causal=True)
    torch.testing.assert_close(cached(x, is_causal=True)[0], plain.out(plain.merge_heads(y)), atol=ATOL, rtol=ATOL)


def test_sliding_window_equals_the_paper_attention_with_the_band_as_its_mask():
    torch.manual_seed(0)
    windowed = CachedSelfAttention(D, H, window=3).eval()
    plain = plain_twin(windowed).eval()
    x = inputs()
    band = sliding_window_mask(T, T, 3)
    assert torch.equal(band & causal_mask(T, T), band)  # the band is causal
    torch.testing.assert_close(windowed(x, is_causal=True)[0], plain(x, attn_mask=band)[0], atol=ATOL, rtol=ATOL)
    # without is_causal the window is not applied
    torch.testing.assert_close(windowed(x)[0], plain(x)[0], atol=0, rtol=0)


@pytest.mark.parametrize("need_weights", [False, True])
def test_grouped_query_attention_with_as_many_kv_heads_as_heads_equals_multi_head_attention(need_weights):
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(D, H, n_kv_heads=H).eval()
    plain = plain_twin(gqa).eval()
    x = inputs()
    got = gqa(x, is_causal=True, need_weights=need_weights)
    want = plain(x, is_causal=True, need_weights=need_weights)
    torch.testing.assert_close(got[0], want[0], atol=0, rtol=0)
    assert gqa.n_kv_heads == H and gqa.qkv.weight.shape == (3 * D, D)


def test_grouped_query_attention_equals_multi_head_attention_with_each_kv_head_copied_to_its_group():
    torch.manual_seed(0)
    gqa, d_head, group = GroupedQueryAttention(D, H, n_kv_heads=2).eval(), D // H, 2
    w_q, w_k, w_v = gqa.qkv.weight.split([D, 2 * d_head, 2 * d_head])
    b_q, b_k, b_v = gqa.qkv.bias.split([D, 2 * d_head, 2 * d_head])
    copied = MultiHeadAttention(D, H).eval()  # head h reads key/value head h // group
    with torch.no_grad():
        expand = lambda w: w.unflatten(0, (2, d_head)).repeat_interleave(group, dim=0).flatten(0, 1)  # noqa: E731
        copied.qkv.weight.copy_(torch.cat([w_q, expand(w_k), expand(w_v)]))
        copied.qkv.bias.copy_(torch.cat([b_q, expand(b_k), expand(b_v)]))
        copied.out.load_state_dict(gqa.out.state_dict())
    x = inputs()
    torch.testing.assert_close(gqa(x, is_causal=True)[0], copied(x, is_causal=True)[0], atol=ATOL, rtol=ATOL)


def test_grouped_query_construction_draws_the_same_random_numbers_as_its_own_sizes():
    # the parent's full-size projections are built on the meta device: seeded models do not change
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(D, H, n_kv_heads=2)
    torch.manual_seed(0)
    qkv, out = torch.nn.Linear(D, D + 2 * 2 * (D // H)), torch.nn.Linear(D, D)
    assert torch.equal(gqa.qkv.weight, qkv.weight) and torch.equal(gqa.out.weight, out.weight)
    assert not any(p.is_meta for p in gqa.parameters())


def test_bad_kv_heads_are_rejected():
    with pytest.raises(ValueError, match=r"n_heads must be an int >= 1, a multiple of 3 \(n_kv_heads: .*\), got 4"):
        GroupedQueryAttention(D, H, n_kv_heads=3)
    with pytest.raises(ValueError, match="n_kv_heads"):
        GroupedQueryAttention(D, H, n_kv_heads=0)


def test_failed_attn_mask_check_leaves_a_static_cache_unchanged():
    from transformer_lib.serving.kv_cache import StaticCache

    torch.manual_seed(0)
    mha = CachedSelfAttention(D, H).eval()
    cache, clean = StaticCache(1, B, H, 16, D // H), StaticCache(1, B, H, 16, D // H)
    prompt, new = torch.randn(B, 4, D), torch.randn(B, 1, D)
    mha(prompt, is_causal=True, cache=cache)
    mha(prompt, is_causal=True, cache=clean)
    keys, values = cache.keys[0].clone(), cache.values[0].clone()
    with pytest.raises(
        ValueError, match=r"attn_mask must be a tensor that broadcasts to \(2, 4, 1, 5\) .*got \(5, 5\)"
    ):
        mha(new, is_causal=True, attn_mask=torch.ones(5, 5, dtype=torch.bool), cache=cache)
    with pytest.raises(ValueError, match=r"attention_mask must be a tensor of shape \(2, 5\), got \(2, 4\)"):
        mha(new, is_causal=True, attention_mask=torch.ones(B, 4, dtype=torch.bool), cache=cache)
    assert cache.lengths == [4] and torch.equal(cache.keys[0], keys) and torch.equal(cache.values[0], values)
    mask = torch.ones(1, 5, dtype=torch.bool)
    torch.testing.assert_close(
        mha(new, is_causal=True, attn_mask=mask, cache=cache)[0],
        mha(new, is_causal=True, attn_mask=mask, cache=clean)[0],
    )
    assert cache.lengths == [5]


def test_cached_attention_is_self_attention_only():
    with pytest.raises(TypeError):
        CachedSelfAttention(D, H)(inputs(), inputs())

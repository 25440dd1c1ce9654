"""MultiHeadAttention equals torch.nn.MultiheadAttention (batch_first=True) with the same weights.

Our boolean masks mean True = attend; torch's mean True = IGNORE, so torch gets ``~mask``.
"""

import pytest
import torch
import torch.nn as nn

from transformer_lib.blocks.masking import causal_mask, padding_mask
from transformer_lib.blocks.multihead import MultiHeadAttention

B, TQ, TK, D, H = 2, 5, 7, 16, 4
ATOL = 1e-5


def pair(bias=True, seed=0):
    """(ours, torch's) with identical weights, in eval mode. torch's biases are zero-initialised: randomise them."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, H, batch_first=True, bias=bias).eval()
    if bias:
        with torch.no_grad():
            ref.in_proj_bias.normal_()
            ref.out_proj.bias.normal_()
    return MultiHeadAttention(D, H, bias=bias).eval().load_from_torch(ref), ref


def inputs(tq=TQ, tk=TK, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, tq, D, generator=g), torch.randn(B, tk, D, generator=g), torch.randn(B, tk, D, generator=g)


def check(ours, ref, ours_kwargs, ref_args, ref_kwargs):
    """Both of our paths (fast and need_weights) against torch, outputs and per-head weights."""
    expected, expected_w = ref(*ref_args, need_weights=True, average_attn_weights=False, **ref_kwargs)
    out_fast, none = ours(**ours_kwargs)
    out_teach, weights = ours(**ours_kwargs, need_weights=True)
    assert none is None
    assert weights.shape == expected_w.shape  # (B, H, Tq, Tk)
    torch.testing.assert_close(out_fast, expected, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(out_teach, expected, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_torch(bias):
    ours, ref = pair(bias)
    x, _, _ = inputs()
    check(ours, ref, dict(query=x), (x, x, x), {})


def test_cross_attention_with_distinct_key_and_value_matches_torch():
    ours, ref = pair()
    q, k, v = inputs(tq=3, tk=7)
    check(ours, ref, dict(query=q, key=k, value=v), (q, k, v), {})
    # value defaults to key
    check(ours, ref, dict(query=q, key=k), (q, k, k), {})


def test_key_padding_mask_matches_torch():
    ours, ref = pair()
    q, k, v = inputs()
    keep = padding_mask(torch.tensor([7, 4]), TK)  # (B, Tk), True on real tokens
    check(ours, ref, dict(query=q, key=k, value=v, attention_mask=keep), (q, k, v), dict(key_padding_mask=~keep))


def test_causal_mask_matches_torch():
    ours, ref = pair()
    x, _, _ = inputs(tq=6)
    future = nn.Transformer.generate_square_subsequent_mask(6)  # float, -inf on the future
    check(ours, ref, dict(query=x, is_causal=True), (x, x, x), dict(attn_mask=future))
    check(ours, ref, dict(query=x, attn_mask=causal_mask(6)), (x, x, x), dict(attn_mask=~causal_mask(6)))


def test_causal_and_padding_masks_together_match_torch():
    ours, ref = pair()
    x, _, _ = inputs(tq=6)
    keep = padding_mask(torch.tensor([6, 3]), 6)
    check(
        ours,
        ref,
        dict(query=x, is_causal=True, attention_mask=keep),
        (x, x, x),
        dict(attn_mask=~causal_mask(6), key_padding_mask=~keep),
    )


def test_per_head_additive_mask_matches_torch():
    ours, ref = pair()
    q, k, v = inputs()
    g = torch.Generator().manual_seed(3)
    bias = torch.randn(B, H, TQ, TK, generator=g)  # torch takes it as (B * H, Tq, Tk)
    check(
        ours, ref, dict(query=q, key=k, value=v, attn_mask=bias), (q, k, v), dict(attn_mask=bias.reshape(B * H, TQ, TK))
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_give_zero_attention_not_nan(dtype, need_weights):
    ours, _ = pair()
    ours = ours.to(dtype)
    q, k, v = (t.to(dtype) for t in inputs())
    keep = padding_mask(torch.tensor([0, 4]), TK)  # the first sequence has no real key at all
    out, weights = ours(q, k, v, attention_mask=keep, need_weights=need_weights)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    # attention reads nothing, so the output is W_O 0 + b_O = b_O
    torch.testing.assert_close(out[0], ours.out.bias.expand(TQ, D), atol=0, rtol=0)
    if need_weights:
        assert (weights[0] == 0).all() and torch.isfinite(weights).all()


@pytest.mark.parametrize("need_weights", [True, False])
def test_module_runs_in_bf16_and_keeps_the_dtype(need_weights):
    ours, ref = pair()
    q, k, v = inputs()
    expected, _ = ref(q, k, v)
    out, weights = ours.to(torch.bfloat16)(*(t.bfloat16() for t in (q, k, v)), need_weights=need_weights)
    assert out.dtype == torch.bfloat16
    if need_weights:
        assert weights.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected, atol=5e-2, rtol=5e-2)


# ----------------------------------------------------------------------------- bad input
def test_d_model_not_divisible_by_n_heads_is_rejected():
    with pytest.raises(ValueError, match=r"^d_model must be an int >= 1, a multiple of 3 \(n_heads\), got 10$"):
        MultiHeadAttention(10, 3)


def test_mismatched_query_key_value_shapes_are_rejected():
    mha = MultiHeadAttention(D, H)
    q, k, v = inputs()
    with pytest.raises(ValueError, match=r"query must be a tensor of shape \(B, Tq, 16\), got \(2, 5, 8\)"):
        mha(q[..., :8])
    with pytest.raises(ValueError, match=r"key must be a tensor of shape \(2, Tk, 16\), got \(1, 7, 16\)"):
        mha(q, k[:1], v[:1])
    with pytest.raises(ValueError, match=r"value must be a tensor of shape \(2, 7, 16\), got \(2, 6, 16\)"):
        mha(q, k, v[:, :6])
    with pytest.raises(ValueError, match=r"value must be None \(self-attention; for cross.*got tensor"):
        mha(q, value=v)


def test_bad_masks_are_rejected():
    mha = MultiHeadAttention(D, H)
    q, k, v = inputs()
    with pytest.raises(ValueError, match=r"attention_mask must be a torch.bool tensor, got torch.int64"):
        mha(q, k, v, attention_mask=torch.ones(B, TK, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attention_mask must be a tensor of shape \(2, 7\), got \(2, 5\)"):
        mha(q, k, v, attention_mask=torch.ones(B, TQ, dtype=torch.bool))
    with pytest.raises(
        ValueError, match=r"attn_mask must be a torch.bool or torch.float16 or .* tensor, got torch.int32"
    ):
        mha(q, k, v, attn_mask=torch.ones(TQ, TK, dtype=torch.int32))
    with pytest.raises(
        ValueError, match=r"attn_mask must be a tensor that broadcasts to \(2, 4, 5, 7\) .*got \(7, 5\)"
    ):
        mha(q, k, v, attn_mask=torch.ones(TK, TQ, dtype=torch.bool))


def test_loading_an_incompatible_torch_module_is_rejected():
    with pytest.raises(ValueError, match=r"mha must have embed_dim=16, num_heads=4, got embed_dim=8, num_heads=2"):
        MultiHeadAttention(D, H).load_from_torch(nn.MultiheadAttention(8, 2))
    with pytest.raises(ValueError, match=r"mha has biases must be True \(as this module\), got False"):
        MultiHeadAttention(D, H, bias=True).load_from_torch(nn.MultiheadAttention(D, H, bias=False))
    with pytest.raises(ValueError, match=r"bias"):
        MultiHeadAttention(D, H, bias=False).load_from_torch(nn.MultiheadAttention(D, H, bias=True))
    with pytest.raises(ValueError, match=r"mha must have bias_k=None, got bias_k="):
        MultiHeadAttention(D, H).load_from_torch(nn.MultiheadAttention(D, H, add_bias_kv=True))
    with pytest.raises(ValueError, match=r"mha must have _qkv_same_embed_dim=True, got _qkv_same_embed_dim=False"):
        MultiHeadAttention(D, H).load_from_torch(nn.MultiheadAttention(D, H, kdim=8, vdim=8))

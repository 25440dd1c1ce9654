"""Scaled dot-product attention: the teaching path (explicit softmax) and the fast path both equal PyTorch's
``F.scaled_dot_product_attention``; temperature behaves as the closed forms say; weights are distributions."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.blocks.attention import attention_weights, scaled_dot_product_attention, softmax_with_temperature

B, H, TQ, TK, D = 2, 3, 5, 7, 8


def make_qkv(tq=TQ, tk=TK, d=D, dv=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, tq, d, generator=g)
    k = torch.randn(B, H, tk, d, generator=g)
    v = torch.randn(B, H, tk, dv or d, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def random_bool_mask(shape, seed=1):
    """Random True(=attend)/False mask with at least one True per row (no fully masked row)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) > 0.4
    mask[..., 0] = True
    return mask


def loop_causal(tq, tk):
    """Causal mask written as the definition: query i (aligned to the end of the keys) sees key j <= i + tk - tq."""
    return torch.tensor([[j <= i + tk - tq for j in range(tk)] for i in range(tq)])


def reference_weights(q, k, scale, additive=None):
    """softmax(q k^T * scale + additive) in float64."""
    scores = q.double() @ k.double().transpose(-2, -1) * scale
    if additive is not None:
        scores = scores + additive.double()
    return torch.softmax(scores, dim=-1)


def masks():
    """(name, our mask, the mask we give F.sdpa): bool masks mean the same (True = attend) in both."""
    bool_mask = random_bool_mask((B, 1, TQ, TK))
    g = torch.Generator().manual_seed(2)
    additive = torch.randn(B, H, TQ, TK, generator=g)  # a soft bias (ALiBi-like), no -inf
    hard = torch.zeros(TQ, TK).masked_fill(~random_bool_mask((TQ, TK), seed=3), torch.finfo(torch.float32).min)
    return [("none", None), ("bool", bool_mask), ("additive", additive), ("additive_hard", hard)]


MASKS = masks()


@pytest.mark.parametrize("name,mask", MASKS, ids=[m[0] for m in MASKS])
def test_teaching_path_matches_torch_sdpa_fp32(name, mask):
    q, k, v = make_qkv()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    additive = (
        None
        if mask is None
        else (torch.zeros(mask.shape).masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else mask)
    )
    torch.testing.assert_close(weights.double(), reference_weights(q, k, 1 / math.sqrt(D), additive), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name,mask", MASKS, ids=[m[0] for m in MASKS])
def test_fast_path_matches_torch_sdpa_fp32(name, mask):
    q, k, v = make_qkv()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
@pytest.mark.parametrize("need_weights", [True, False])
def test_causal_square_matches_torch_is_causal(need_weights, temperature):
    q, k, v = make_qkv(tq=6, tk=6)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / (math.sqrt(D) * temperature))
    out = scaled_dot_product_attention(q, k, v, is_causal=True, need_weights=need_weights, temperature=temperature)
    out = out[0] if need_weights else out
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("tq", [1, 3])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_causal_with_cache_is_aligned_to_the_end_of_the_keys(tq, padded, need_weights):
    # Tq < Tk (decoding with a cache): query i sits at absolute position i + Tk - Tq.
    q, k, v = make_qkv(tq=tq, tk=7)
    pad = torch.ones(B, 1, 1, 7, dtype=torch.bool)
    pad[0, ..., 1] = False  # one padded key in the first sequence
    pad = pad if padded else None
    allowed = loop_causal(tq, 7) if pad is None else loop_causal(tq, 7) & pad
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    out = scaled_dot_product_attention(q, k, v, pad, is_causal=True, need_weights=need_weights)
    out = out[0] if need_weights else out
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    if need_weights:
        weights = scaled_dot_product_attention(q, k, v, pad, is_causal=True, need_weights=True)[1]
        assert (weights[..., ~loop_causal(tq, 7)] == 0).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,mask", MASKS, ids=[m[0] for m in MASKS])
def test_both_paths_match_torch_sdpa_low_precision(dtype, name, mask):
    q, k, v = make_qkv(dtype=dtype)
    ref_mask = mask if mask is None or mask.dtype == torch.bool else mask.to(dtype)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=None if mask is None else mask)
    for out in (
        scaled_dot_product_attention(q, k, v, ref_mask, need_weights=True)[0],
        scaled_dot_product_attention(q, k, v, ref_mask),
    ):
        assert out.dtype == dtype
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.float(), expected, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("temperature", [0.25, 0.7, 1.0, 3.0])
@pytest.mark.parametrize("name,mask", MASKS, ids=[m[0] for m in MASKS])
def test_temperature_equals_torch_sdpa_with_scale(temperature, name, mask):
    q, k, v = make_qkv()
    scale = 1.0 / (math.sqrt(D) * temperature)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    teach, weights = scaled_dot_product_attention(q, k, v, mask, temperature=temperature, need_weights=True)
    fast = scaled_dot_product_attention(q, k, v, mask, temperature=temperature)
    torch.testing.assert_close(teach, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(fast, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(weights, attention_weights(q, k, mask, temperature))


def distinct_scores(n_rows=6, n=9, seed=0):
    """Scores whose row maximum beats the runner-up by at least 0.5 (a unique argmax)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(n_rows, n, generator=g)
    top = scores.argmax(-1)
    scores[torch.arange(n_rows), top] = scores.max(-1).values + 0.5
    return scores, top


def test_temperature_to_zero_tends_to_one_hot_argmax():
    scores, top = distinct_scores()
    one_hot = F.one_hot(top, scores.shape[-1]).float()
    previous_gap = math.inf
    for t in (1.0, 0.3, 0.1, 0.03, 0.01):
        gap = (softmax_with_temperature(scores, t) - one_hot).abs().max().item()
        assert gap < previous_gap  # monotone approach
        previous_gap = gap
    # closed form bound: every non-argmax weight is at most exp(-margin / T) with margin >= 0.5
    assert previous_gap <= (scores.shape[-1] - 1) * math.exp(-0.5 / 0.01)


def test_temperature_to_infinity_tends_to_uniform_closed_form():
    scores, _ = distinct_scores()
    n = scores.shape[-1]
    for t in (1e2, 1e3, 1e4):
        w = softmax_with_temperature(scores.double(), t)
        # first-order expansion: softmax(s / T) = 1/n + (s - mean(s)) / (n T) + O(1 / T^2)
        first_order = 1 / n + (scores.double() - scores.double().mean(-1, keepdim=True)) / (n * t)
        assert (w - first_order).abs().max().item() < 10 / t**2
        assert (w - 1 / n).abs().max().item() < 5 / t


@settings(max_examples=30, deadline=None)
@given(
    tq=st.integers(1, 6),
    tk=st.integers(1, 6),
    d=st.integers(1, 9),
    temperature=st.floats(0.05, 20.0),
    masked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_attention_rows_sum_to_one(tq, tk, d, temperature, masked, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, tq, d, generator=g) * 3, torch.randn(2, tk, d, generator=g) * 3
    mask = (torch.rand(2, tq, tk, generator=g) > 0.5) if masked else None
    w = attention_weights(q, k, mask, temperature)
    assert w.shape == (2, tq, tk)
    assert (w >= 0).all()
    expected = torch.ones(2, tq) if mask is None else mask.any(-1).float()  # fully masked rows sum to 0
    torch.testing.assert_close(w.sum(-1), expected, atol=1e-5, rtol=0)
    if mask is not None:
        assert (w[~mask] == 0).all()


# ----------------------------------------------------------------------------- fully masked rows
def fully_masked_bool():
    mask = random_bool_mask((B, 1, TQ, TK), seed=7)
    mask[:, :, 1] = False  # query 1 may attend to nothing
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("temperature", [1.0, 0.5])
@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_give_zeros_not_nan(dtype, kind, temperature, need_weights):
    q, k, v = make_qkv(dtype=dtype)
    mask = fully_masked_bool()
    if kind == "additive":
        mask = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
    result = scaled_dot_product_attention(q, k, v, mask, temperature=temperature, need_weights=need_weights)
    out = result[0] if need_weights else result
    assert out.dtype == dtype
    assert not torch.isnan(out).any()
    assert (out[:, :, 1] == 0).all()
    assert torch.isfinite(out).all()
    if need_weights:
        assert (result[1][:, :, 1] == 0).all()
        torch.testing.assert_close(result[1][:, :, 0].float().sum(-1), torch.ones(B, H), atol=1e-2, rtol=0)


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_have_finite_gradients(need_weights):
    q, k, v = (t.requires_grad_() for t in make_qkv())
    result = scaled_dot_product_attention(q, k, v, fully_masked_bool(), temperature=0.5, need_weights=need_weights)
    (result[0] if need_weights else result).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


# ----------------------------------------------------------------------------- bad input
def test_non_positive_temperature_is_rejected():
    q, k, v = make_qkv()
    for t in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match=rf"temperature must be a finite number > 0 \(as T -> 0 .*\), got {t}"):
            scaled_dot_product_attention(q, k, v, temperature=t)
        with pytest.raises(ValueError, match=r"temperature"):
            softmax_with_temperature(torch.zeros(3), t)


@pytest.mark.parametrize(
    "shapes,pattern",
    [
        (
            ((2, 5, 8), (2, 7, 6), (2, 7, 8)),
            r"k must be a tensor of shape \(\.\.\., Tk, 8\) \(D as q's\), got \(2, 7, 6\)",
        ),
        (
            ((2, 5, 8), (2, 7, 8), (2, 6, 8)),
            r"v must be a tensor of shape \(\.\.\., 7, Dv\) \(Tk as k's\), got \(2, 6, 8\)",
        ),
        (((2, 5, 8), (7, 8), (7, 8)), r"same number of dimensions.*got 'q\(2, 5, 8\), k\(7, 8\), v\(7, 8\)'"),
        (((2, 5, 8), (3, 7, 8), (3, 7, 8)), r"leading dimensions \(B, H\) .*broadcasting.*q\(2, 5, 8\), k\(3, 7, 8\)"),
    ],
)
def test_mismatched_qkv_shapes_are_rejected(shapes, pattern):
    q, k, v = (torch.randn(s) for s in shapes)
    for need_weights in (True, False):
        with pytest.raises(ValueError, match=pattern):
            scaled_dot_product_attention(q, k, v, need_weights=need_weights)


@pytest.mark.parametrize("need_weights", [True, False])
def test_k_and_v_of_another_dtype_than_q_are_rejected(need_weights):
    q, k, v = make_qkv()
    for args, name, got in (((q, k.double(), v), "k", "float64"), ((q, k, v.half()), "v", "float16")):
        with pytest.raises(ValueError, match=rf"{name} must be a torch.float32 tensor, got torch.{got}"):
            scaled_dot_product_attention(*args, need_weights=need_weights)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_bad_masks_are_rejected(is_causal, need_weights):
    q, k, v = make_qkv()
    int_mask = torch.ones(TQ, TK, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"mask must be a torch.bool or torch.float16 or .* tensor, got torch.int64"):
        scaled_dot_product_attention(q, k, v, int_mask, is_causal=is_causal, need_weights=need_weights)
    wrong = torch.ones(TK, TQ, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"mask must be a tensor that broadcasts to \(2, 3, 5, 7\) .*got \(7, 5\)"):
        scaled_dot_product_attention(q, k, v, wrong, is_causal=is_causal, need_weights=need_weights)


def test_causal_with_more_queries_than_keys_is_rejected():
    q, k, v = make_qkv(tq=7, tk=5)
    with pytest.raises(ValueError, match=r"t_k must be an int >= 7 .*got 5"):
        scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_softmax_with_temperature_refuses_nan_and_plus_inf_scores(bad):
    with pytest.raises(ValueError, match=r"scores must be finite \(no NaN or \+inf; -inf masks\)"):
        softmax_with_temperature(torch.tensor([[1.0, bad, 0.0]]))
    masked = softmax_with_temperature(torch.tensor([[1.0, -math.inf, 0.0], [-math.inf] * 3]))  # -inf still masks
    assert torch.allclose(masked[0], torch.softmax(torch.tensor([1.0, 0.0]), -1)[[0, 0, 1]] * torch.tensor([1, 0, 1]))
    assert torch.equal(masked[1], torch.zeros(3))


def test_softmax_with_temperature_refuses_integer_scores():
    with pytest.raises(ValueError, match=r"scores must be a floating-point tensor, got torch.int64"):
        softmax_with_temperature(torch.tensor([[1, 2, 3]]))


def test_nan_flows_through_the_fast_path_to_the_outputs_it_touches_and_the_teaching_path_refuses_it():
    """``scaled_dot_product_attention`` leaves NaN to the model's edge (a diverging run must reach a NaN loss, which
    ``train`` reports, not raise inside a layer); ``attention_weights`` refuses it, as both docstrings say."""
    q, k, v = make_qkv()
    q[0, 0, 1, 0], k[1, 0, 0, 0], v[1, 1, 2, 0] = math.nan, math.inf, math.nan
    out = scaled_dot_product_attention(q, k, v)  # not refused; what NaN in q or k gives is the backend's
    assert out[1, 1, :, 0].isnan().all()  # every query of (1, 1) gives value 2 some weight: all read its NaN
    for name, args in (("q", (q, k.nan_to_num())), ("k", (q.nan_to_num(), k))):  # v: its NaN kept for the call
        for call in (
            lambda: attention_weights(*args),
            lambda: scaled_dot_product_attention(*args, v, need_weights=True),
        ):
            with pytest.raises(ValueError, match=rf"{name} must be finite \(no NaN or inf\), got 1 non-finite"):
                call()

"""Tiled attention with an online softmax, split-K decoding and the recomputing backward, each against PyTorch's
``F.scaled_dot_product_attention`` (the independent reference), and their memory against the T x T path."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.blocks.flash import (
    FlashAttentionFunction,
    attention_with_lse,
    materialised_attention,
    merge_partials,
    split_k_decode,
    tiled_attention,
    trace_one_query_block,
)
from transformer_lib.blocks.masking import causal_mask
from transformer_lib.book_tools.tensor_memory import PeakTensorBytes, peak_tensor_bytes


def qkv(B, H, Tq, Tk, D, Dv=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, Tq, D, generator=g, dtype=dtype),
        torch.randn(B, H, Tk, D, generator=g, dtype=dtype),
        torch.randn(B, H, Tk, Dv or D, generator=g, dtype=dtype),
    )


def sdpa(q, k, v, causal=False, key_mask=None):
    """The reference; our causal convention (queries at the end of the keys) as an explicit boolean mask."""
    mask = None
    if causal:
        mask = causal_mask(q.shape[2], k.shape[2])
    if key_mask is not None:
        km = key_mask[:, None, None, :]
        mask = km if mask is None else mask & km
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 2),
    H=st.integers(1, 3),
    Tq=st.integers(1, 41),
    extra=st.integers(0, 20),
    D=st.sampled_from([1, 8, 17]),
    block_q=st.integers(1, 19),
    block_k=st.integers(1, 23),
    causal=st.booleans(),
)
def test_tiled_attention_matches_sdpa(B, H, Tq, extra, D, block_q, block_k, causal):
    q, k, v = qkv(B, H, Tq, Tq + extra, D)
    out = tiled_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
    torch.testing.assert_close(out, sdpa(q, k, v, causal), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [(1, 1), (7, 5), (16, 16), (64, 200)])
def test_odd_lengths_padding_and_blocks_match_sdpa(causal, block):
    q, k, v = qkv(3, 2, 37, 37, 16, Dv=12)
    key_mask = torch.ones(3, 37, dtype=torch.bool)
    key_mask[1, 30:] = False  # right padding
    key_mask[2, :5] = False  # left padding: the first causal queries of sequence 2 see only padding
    out = tiled_attention(q, k, v, causal=causal, key_mask=key_mask, block_q=block[0], block_k=block[1])
    ref = sdpa(q, k, v, causal, key_mask)
    visible = key_mask[:, None, :] & (causal_mask(37) if causal else torch.ones(37, 37, dtype=torch.bool))
    sees_something = visible.any(-1)[:, None, :].expand(3, 2, 37)  # (B, H, Tq)
    torch.testing.assert_close(out[sees_something], ref[sees_something], atol=1e-6, rtol=1e-6)
    assert not causal or (~sees_something).any()
    assert torch.equal(out[~sees_something], torch.zeros_like(out[~sees_something]))  # zeros, never NaN


def test_log_sum_exp_is_torchs():
    q, k, v = qkv(2, 2, 9, 21, 8)
    _, lse = attention_with_lse(q, k, v, block_q=4, block_k=5)
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.transpose(-1, -2) / math.sqrt(8), -1), atol=1e-6, rtol=0)


def test_half_precision_inputs_give_their_dtype_and_match():
    q, k, v = qkv(1, 2, 33, 33, 16, dtype=torch.bfloat16)
    out = tiled_attention(q, k, v, causal=True, block_q=8, block_k=8)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), sdpa(q.float(), k.float(), v.float(), True), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_through_the_tiles_match_sdpa(causal):
    q, k, v = qkv(2, 2, 19, 19, 8)
    grads = []
    for fn in (lambda *x: tiled_attention(*x, causal=causal, block_q=4, block_k=6), lambda *x: sdpa(*x, causal)):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        (fn(*leaves) * torch.linspace(-1, 1, 8)).sum().backward()
        grads.append([t.grad for t in leaves])
    for ours, ref in zip(*grads):
        torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_recomputing_backward_matches_sdpa(causal):
    q, k, v = qkv(2, 3, 23, 23, 8, Dv=5)
    key_mask = torch.ones(2, 23, dtype=torch.bool)
    key_mask[0, 20:] = False
    small = [t[:, :1, :6].double().requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda *x: FlashAttentionFunction.apply(*x, causal, key_mask[:, :6], 4, 3), small, eps=1e-6
    )
    grads = []
    for fn in (
        lambda *x: FlashAttentionFunction.apply(*x, causal, key_mask, 7, 6),
        lambda *x: sdpa(*x, causal, key_mask),
    ):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        (fn(*leaves) * torch.linspace(-1, 1, 5)).sum().backward()
        grads.append([t.grad for t in leaves])
    for ours, ref in zip(*grads):
        torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


def test_recomputing_backward_takes_a_scale_as_sdpa_does():
    q, k, v = qkv(1, 2, 9, 11, 4)
    grads = []
    for fn in (
        lambda *x: FlashAttentionFunction.apply(*x, False, None, 4, 3, 0.3),
        lambda *x: torch.nn.functional.scaled_dot_product_attention(*x, scale=0.3),
    ):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves)
        (out * torch.linspace(-1, 1, 4)).sum().backward()
        grads.append([out.detach()] + [t.grad for t in leaves])
    for ours, ref in zip(*grads):
        torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_splits", [1, 3, 8, 1000])
def test_split_k_decoding_matches_sdpa(n_splits):
    q, k, v = qkv(2, 4, 1, 301, 16)
    torch.testing.assert_close(split_k_decode(q, k, v, n_splits=n_splits), sdpa(q, k, v), atol=1e-6, rtol=1e-6)


def test_split_k_decoding_with_padding_and_an_all_padded_chunk():
    q, k, v = qkv(2, 2, 2, 40, 8)
    key_mask = torch.ones(2, 40, dtype=torch.bool)
    key_mask[0, :20] = False  # the first two of four chunks see only padding
    out = split_k_decode(q, k, v, n_splits=4, key_mask=key_mask)
    torch.testing.assert_close(out, sdpa(q, k, v, key_mask=key_mask), atol=1e-6, rtol=1e-6)


def test_merge_of_two_halves_is_the_whole():
    q, k, v = qkv(1, 1, 3, 10, 4)
    a, b = attention_with_lse(q, k[:, :, :6], v[:, :, :6]), attention_with_lse(q, k[:, :, 6:], v[:, :, 6:])
    torch.testing.assert_close(merge_partials([a[0], b[0]], [a[1], b[1]]), sdpa(q, k, v), atol=1e-6, rtol=1e-6)


def test_trace_ends_at_the_softmax_of_the_whole_row():
    q, k, v = qkv(1, 1, 4, 13, 8)
    steps = trace_one_query_block(q[0, 0], k[0, 0], v[0, 0], block_k=4, causal=True)
    assert [s["j0"] for s in steps] == [0, 4, 8, 12]
    scores = torch.tensor([x for s in steps for x in zip(*s["scores"])]).T  # (4, 13)
    torch.testing.assert_close(torch.tensor(steps[-1]["m"]), scores.max(-1).values)
    torch.testing.assert_close(torch.tensor(steps[-1]["out"]).float(), sdpa(q, k, v, True)[0, 0], atol=1e-6, rtol=0)


def test_materialised_path_matches_sdpa():
    q, k, v = qkv(2, 2, 11, 11, 8)
    torch.testing.assert_close(materialised_attention(q, k, v, causal=True), sdpa(q, k, v, True), atol=1e-6, rtol=1e-6)


def test_memory_of_tiles_grows_linearly_and_of_scores_quadratically():
    peaks = {}
    for T in (256, 512, 1024):
        q, k, v = qkv(1, 1, T, T, 32)
        peaks[T] = (
            peak_tensor_bytes(lambda: materialised_attention(q, k, v)),
            peak_tensor_bytes(lambda: tiled_attention(q, k, v, block_q=64, block_k=64)),
        )
    assert peaks[256][0] >= 256 * 256 * 4 * 2  # scores and weights, both T x T fp32, alive together
    for T in (512, 1024):
        assert peaks[T][0] / peaks[T // 2][0] > 3.5  # doubling T: ~4x
        assert peaks[T][1] / peaks[T // 2][1] < 2.2  # doubling T: ~2x (Q, K, V, O grow with T; tiles do not)


def test_peak_tensor_bytes_counts_views_once_and_frees():
    with PeakTensorBytes() as mem:
        a = torch.empty(1000)  # 4000 bytes
        b = a.view(10, 100)
        del a
        c = torch.empty(500)  # 2000 bytes
        del b, c
    assert (mem.peak, mem.live) == (6000, 0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda q, k, v: tiled_attention(q[0], k, v), "q must be a tensor of shape (B, H, Tq, D), got (2, 4, 8)"),
        (lambda q, k, v: tiled_attention(q.long(), k, v), "q must be a floating-point tensor, got torch.int64"),
        (lambda q, k, v: tiled_attention(q, k.double(), v), "k must be a torch.float32 tensor, got torch.float64"),
        (lambda q, k, v: tiled_attention(q, k, v.half()), "v must be a torch.float32 tensor, got torch.float16"),
        (lambda q, k, v: tiled_attention(q, k[..., :3], v), "k must be a tensor of shape (1, 2, Tk, 8)"),
        (lambda q, k, v: tiled_attention(q, k, v[:, :, :5]), "v must be a tensor of shape (1, 2, 6, Dv)"),
        (lambda q, k, v: split_k_decode(q, k[:, :, :0], v[:, :, :0]), "Tk >= 1 keys), got (1, 2, 0, 8)"),
        (lambda q, k, v: tiled_attention(q, k, v, block_k=0), "block_k must be an int >= 1, got 0"),
        (lambda q, k, v: tiled_attention(q, k, v, key_mask=torch.ones(1, 6)), "key_mask must be a torch.bool tensor"),
        (lambda q, k, v: tiled_attention(q, k, v, key_mask=torch.ones(2, 5, dtype=torch.bool)), "(1, 6) (B, Tk"),
        (lambda q, k, v: split_k_decode(q, k, v, n_splits=0), "n_splits must be an int >= 1, got 0"),
    ],
)
def test_bad_inputs_are_named(call, message):
    q, k, v = qkv(1, 2, 4, 6, 8)
    with pytest.raises(ValueError) as error:
        call(q, k, v)
    assert message in str(error.value)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -0.5])
def test_tiled_attention_refuses_a_non_finite_or_non_positive_scale(scale):
    q, k, v = qkv(1, 2, 5, 6, 8)
    with pytest.raises(ValueError, match=r"scale must be a finite number > 0 .*got"):
        tiled_attention(q, k, v, scale=scale)
    torch.testing.assert_close(tiled_attention(q, k, v, scale=0.5), sdpa_scaled(q, k, v, 0.5))


def sdpa_scaled(q, k, v, scale):
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


def test_merge_partials_refuses_empty_or_unequal_lists():
    o, lse = attention_with_lse(*qkv(1, 1, 2, 3, 4))
    with pytest.raises(
        ValueError, match=r"outs must hold at least 1 item\(s\) \(one partial output per key set\), got 0"
    ):
        merge_partials([], [])
    with pytest.raises(ValueError, match=r"lses must hold exactly 1 item\(s\) \(one log-sum-exp per output\), got 2"):
        merge_partials([o], [lse, lse])
    torch.testing.assert_close(merge_partials([o], [lse]), o)

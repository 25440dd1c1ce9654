"""Chapter 03 exercise checks: the right answer passes, common mistakes fail with a hint."""

import math

import pytest
import torch

from transformer_lib.exercises.multi_head_attention import (
    check_multi_head_attention,
    check_previous_token_score,
    check_split_heads,
    explain_weights_shape_prediction,
)


# ----------------------------------------------------------------------------- split_heads
def split_heads(x, n_heads):
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads).transpose(1, 2)


def test_split_heads_solution_passes():
    result = check_split_heads(split_heads)
    assert result and "Correct." in repr(result)


def test_split_heads_solution_agrees_with_torch_chunking():
    # independent of the library: head h is the h-th chunk of the features
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    for h, chunk in enumerate(x.chunk(3, dim=-1)):
        assert torch.equal(heads[:, h], chunk)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h), "mixes positions"),
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2), "contiguous block"),
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], h, x.shape[2] // h), "move the head dimension"),
    ],
)
def test_split_heads_common_mistakes_get_their_hint(wrong, hint):
    result = check_split_heads(wrong)
    assert not result and hint in result.message


def test_split_heads_stub_is_reported_not_raised():
    def stub(x, n_heads):
        raise NotImplementedError("fill me in")

    result = check_split_heads(stub)
    assert not result and "NotImplementedError" in result.message


# ----------------------------------------------------------------------------- multi-head attention
def mha(x, w_qkv, b_qkv, w_o, b_o, n_heads, scale=None, heads=None, out=True):
    """Written from the paper's formula with torch's own SDPA (independent of the library's module)."""
    heads = heads or n_heads
    B, T, d = x.shape
    q, k, v = (t.view(B, T, heads, d // heads).transpose(1, 2) for t in (x @ w_qkv.T + b_qkv).split(d, -1))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)  # (B, H, T, d_head)
    y = y.transpose(1, 2).reshape(B, T, d)
    return y @ w_o.T + b_o if out else y


def test_multi_head_attention_solution_passes():
    assert check_multi_head_attention(mha)


def test_multi_head_attention_reference_equals_nn_multihead_attention():
    # the library reference used by the check agrees with torch.nn.MultiheadAttention
    torch_mha = torch.nn.MultiheadAttention(12, 3, batch_first=True).eval()
    x = torch.randn(2, 5, 12)
    want = torch_mha(x, x, x, need_weights=False)[0]
    got = mha(
        x, torch_mha.in_proj_weight, torch_mha.in_proj_bias, torch_mha.out_proj.weight, torch_mha.out_proj.bias, 3
    )
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda *a: mha(*a, heads=1), "single-head"),
        (lambda *a: mha(*a, scale=1 / math.sqrt(a[0].shape[-1])), "sqrt(d_head)"),
        (lambda *a: mha(*a, out=False), "output projection is missing"),
    ],
)
def test_multi_head_attention_common_mistakes_get_their_hint(wrong, hint):
    result = check_multi_head_attention(wrong)
    assert not result and hint in result.message


# ----------------------------------------------------------------------------- previous-token score
def previous(attn):
    return torch.diagonal(attn, offset=-1, dim1=-2, dim2=-1).mean(-1)


def test_previous_token_score_solution_passes():
    assert check_previous_token_score(previous)


def test_previous_token_score_loop_solution_passes():
    def loop(attn):
        T = attn.shape[-1]
        return torch.stack([sum(a[i, i - 1] for i in range(1, T)) / (T - 1) for a in attn])

    assert check_previous_token_score(loop)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda a: torch.diagonal(a, offset=1, dim1=-2, dim2=-1).mean(-1), "NEXT token"),
        (lambda a: torch.diagonal(a, dim1=-2, dim2=-1).mean(-1), "on itself"),
        (lambda a: torch.diagonal(a, offset=-1, dim1=-2, dim2=-1).sum(-1) / a.shape[-1], "divided by T"),
    ],
)
def test_previous_token_score_common_mistakes_get_their_hint(wrong, hint):
    result = check_previous_token_score(wrong)
    assert not result and hint in result.message


def test_previous_token_score_wrong_shape_is_explained():
    result = check_previous_token_score(lambda a: previous(a).mean())
    assert not result and "shape" in result.message


# ----------------------------------------------------------------------------- predict the weights' shape
def test_weights_shape_prediction_passes_the_shape_written_from_the_formula():
    # (B, H, Tq, Tk) from the notation page, with the check's defaults B=3, H=8, Tq=7, Tk=5
    result = explain_weights_shape_prediction((3, 8, 7, 5))
    assert result and "Correct." in repr(result)
    assert explain_weights_shape_prediction((2, 4, 6, 9), batch=2, t_query=6, t_key=9, n_heads=4)


@pytest.mark.parametrize(
    "guess, words",
    [
        ((3, 7, 5), ["4 axes", "average_attn_weights"]),
        ((3, 8, 7, 7), ["axis 3 is 5, not 7", "keys of the memory"]),
        ((3, 7, 8, 5), ["axis 1 is 8, not 7", "axis 2 is 7, not 8"]),
        ("3, 8, 7, 5", ["tuple of 4 integers"]),
    ],
)
def test_weights_shape_prediction_explains_a_wrong_guess(guess, words):
    result = explain_weights_shape_prediction(guess)
    assert not result
    for w in words:
        assert w in result.message

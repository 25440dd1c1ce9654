"""Chapter 02: the self-checking exercises and the temperature figures' helpers.

A correct reader solution (written here independently of the library) must pass each check; the usual
mistakes must fail with a message that names them. The figure helpers are checked against PyTorch
(``Categorical.entropy``) and against the real model's own attention maps. The statistics themselves
(entropy in bits, neighbour weights) are tested in ``test_head_stats.py``.
"""

import math

import pytest
import torch

from transformer_lib.exercises.attention import (
    check_attention_entropy,
    check_scaled_dot_product_attention,
    check_softmax_with_temperature,
)
from transformer_lib.viz.attention_widgets import head_queries_keys, temperature_frame


# ----------------------------------------------------------------------------- reader solutions
def softmax_t(scores, temperature):
    z = scores / temperature
    e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def naive_softmax_t(scores, temperature):  # overflows on large scores
    e = torch.exp(scores / temperature)
    return e / e.sum(dim=-1, keepdim=True)


def attention(q, k, v):
    scores = torch.einsum("bqd,bkd->bqk", q, k) / q.shape[-1] ** 0.5
    return softmax_t(scores, 1.0) @ v


def entropy_bits(w):
    logs = torch.where(w > 0, torch.log2(w.clamp_min(1e-38)), torch.zeros_like(w))
    return -(w * logs).sum(-1)


def not_implemented(*args):
    raise NotImplementedError("fill me in")


# ----------------------------------------------------------------------------- exercise 1
def test_softmax_check_accepts_a_correct_solution():
    result = check_softmax_with_temperature(softmax_t)
    assert result, result.message
    assert "Correct" in repr(result)


def test_softmax_check_reports_a_stub_without_raising():
    result = check_softmax_with_temperature(not_implemented)
    assert not result and "NotImplementedError" in result.message


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda s, t: torch.softmax(s, -1), "divide the scores by the temperature"),
        (lambda s, t: torch.softmax(s * t, -1), "do not multiply"),
        (lambda s, t: torch.softmax(s / t, 0), "wrong dimension"),
        (naive_softmax_t, "subtract each row's maximum"),
    ],
)
def test_softmax_check_names_the_mistake(wrong, hint):
    result = check_softmax_with_temperature(wrong)
    assert not result
    assert hint in result.message, result.message
    assert "Not yet" in result._repr_markdown_()


# ----------------------------------------------------------------------------- exercise 2
def test_attention_check_accepts_a_correct_solution():
    result = check_scaled_dot_product_attention(attention)
    assert result, result.message


def test_attention_check_accepts_pytorchs_builtin():
    result = check_scaled_dot_product_attention(torch.nn.functional.scaled_dot_product_attention)
    assert result, result.message


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v, "divide the scores by sqrt(d_k)"),
        (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], -1) @ v, "not d_k"),
        (
            lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, -2) @ v,
            "normalises over the queries",
        ),
    ],
)
def test_attention_check_names_the_mistake(wrong, hint):
    result = check_scaled_dot_product_attention(wrong)
    assert not result
    assert hint in result.message, result.message


def test_attention_check_reports_a_wrong_shape():
    result = check_scaled_dot_product_attention(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1))
    assert not result and "shape" in result.message


# ----------------------------------------------------------------------------- exercise 3
def test_entropy_check_accepts_a_correct_solution():
    result = check_attention_entropy(entropy_bits)
    assert result, result.message


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda w: -(w * torch.log(w.clamp_min(1e-38))).sum(-1), "nats"),
        (lambda w: (w * torch.log2(w.clamp_min(1e-38))).sum(-1), "wrong sign"),
        (lambda w: -(w * torch.log2(w)).sum(-1), "0 * log(0) is NaN"),
        (lambda w: -(w * torch.log2(w.clamp_min(1e-38))).sum(0), "wrong dimension"),
        (lambda w: -(w * torch.log(w)).sum(-1), "nats"),  # nats and NaN on zeros: the first mistake is named
    ],
)
def test_entropy_check_names_the_mistake(wrong, hint):
    result = check_attention_entropy(wrong)
    assert not result
    assert hint in result.message, result.message


# ----------------------------------------------------------------------------- figures on the real model
@pytest.fixture(scope="module")
def minilm():
    from transformer_lib.models.pretrained import load_minilm

    return load_minilm(device="cpu")


@pytest.mark.parametrize("layer, head", [(0, 2), (1, 8), (5, 11)])
def test_head_queries_keys_reproduce_the_models_own_attention(minilm, layer, head):
    from transformer_lib import attention_weights
    from transformer_lib.models.pretrained import attention_maps

    model, tokenizer = minilm
    sentence = "The cat sat on the mat because it was warm."
    tokens, maps = attention_maps(model, tokenizer, sentence)  # (L, H, T, T)
    tokens2, q, k = head_queries_keys(model, tokenizer, sentence, layer, head)
    assert tokens2 == tokens and q.shape == k.shape == (len(tokens), model.layers[0].self_attn.d_head)
    torch.testing.assert_close(attention_weights(q, k), maps[layer, head], atol=1e-5, rtol=1e-4)


def test_head_queries_keys_rejects_a_layer_out_of_range(minilm):
    model, tokenizer = minilm
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 5\], got 6"):
        head_queries_keys(model, tokenizer, "hi", 6, 0)
    with pytest.raises(ValueError, match=r"head must be an int in \[0, 11\], got 12"):
        head_queries_keys(model, tokenizer, "hi", 0, 12)


def test_temperature_frame_caption_reports_row_entropies():
    q, k = torch.randn(4, 8), torch.randn(4, 8)
    tokens = ["a", "b", "c", "d"]
    _, cold = temperature_frame(q, k, tokens, 0.1)
    _, hot = temperature_frame(q, k, tokens, 5.0)
    for caption in (cold, hot):
        assert "bits" in caption and all(t in caption for t in tokens)
    w_hot = torch.softmax(q @ k.T / (math.sqrt(8) * 5.0), -1)  # the same weights, straight from PyTorch
    bits = torch.distributions.Categorical(probs=w_hot).entropy() / math.log(2.0)  # (4,), nats -> bits
    assert f"{bits.mean():.2f} bits" in hot
    assert all(f"{tok}&nbsp;{b:.2f}" in hot for tok, b in zip(tokens, bits.tolist()))


def test_score_variance_prediction_passes_d_k_and_one_and_explains_a_standard_deviation():
    from transformer_lib.exercises.attention import explain_score_variance_prediction

    q, k = torch.randn(20000, 256, generator=torch.Generator().manual_seed(0)).chunk(2)  # independent, unit variance
    dots = (q * k).sum(-1)
    raw, scaled = dots.var().item(), (dots / 16).var().item()
    assert explain_score_variance_prediction(256, 1, 256, raw, scaled)
    wrong = explain_score_variance_prediction(16, 1, 256, raw, scaled)
    assert not wrong and "standard deviation" in wrong.message
    swapped = explain_score_variance_prediction(1, 256, 256, raw, scaled)
    assert not swapped and "scaled variance" in swapped.message and "divides the variance by d_k" in swapped.message

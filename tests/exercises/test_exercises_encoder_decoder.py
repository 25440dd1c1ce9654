"""Chapter 05 exercise checks: the right answer passes, common mistakes fail with a hint."""

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.exercises.encoder_decoder import (
    _reference_ffn,
    _reference_layer_norm,
    _reference_residual,
    check_feed_forward,
    check_layer_norm,
    check_residual,
)


# ----------------------------------------------------------------------------- layer norm
def layer_norm(x, gamma, beta, eps):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)  # PyTorch's own, independent of the library


def test_layer_norm_solution_passes():
    result = check_layer_norm(layer_norm)
    assert result and "Correct." in repr(result)


def test_layer_norm_written_out_passes():
    def mine(x, gamma, beta, eps):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * gamma + beta

    assert check_layer_norm(mine)


def test_layer_norm_reference_equals_torch():
    x, gamma, beta = torch.randn(2, 3, 7) * 5, torch.randn(7), torch.randn(7)
    assert torch.allclose(_reference_layer_norm(x, gamma, beta, 1e-5), layer_norm(x, gamma, beta, 1e-5), atol=1e-5)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            lambda x, g, b, e: F.layer_norm(x.transpose(1, 2), x.shape[1:2], None, None, e).transpose(1, 2) * g + b,
            "time axis",
        ),
        (
            lambda x, g, b, e: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + e) * g + b,
            "unbiased",
        ),
        (lambda x, g, b, e: F.layer_norm(x, x.shape[-1:], eps=e), "gamma and beta"),
    ],
)
def test_layer_norm_common_mistakes_get_their_hint(wrong, hint):
    result = check_layer_norm(wrong)
    assert not result and hint in result.message


def test_layer_norm_stub_is_reported_not_raised():
    def stub(x, gamma, beta, eps):
        raise NotImplementedError

    result = check_layer_norm(stub)
    assert not result and "NotImplementedError" in result.message


# ----------------------------------------------------------------------------- feed-forward
def ffn(x, w1, b1, w2, b2):
    return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


def test_feed_forward_solution_passes():
    assert check_feed_forward(ffn)


def test_feed_forward_reference_equals_a_torch_sequential():
    seq = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 6))
    x = torch.randn(2, 4, 6)
    with torch.no_grad():
        got = _reference_ffn(x, seq[0].weight, seq[0].bias, seq[2].weight, seq[2].bias)
        assert torch.allclose(got, seq(x), atol=1e-6)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda x, w1, b1, w2, b2: F.linear(F.linear(x, w1, b1), w2, b2), "no non-linearity"),
        (lambda x, w1, b1, w2, b2: F.relu(F.linear(F.linear(x, w1, b1), w2, b2)), "after the second layer"),
        (lambda x, w1, b1, w2, b2: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2), "GELU"),
    ],
)
def test_feed_forward_common_mistakes_get_their_hint(wrong, hint):
    result = check_feed_forward(wrong)
    assert not result and hint in result.message


# ----------------------------------------------------------------------------- residual
def residual(x, w, b, norm_first):
    ln = lambda h: F.layer_norm(h, h.shape[-1:])  # noqa: E731
    f = lambda h: F.linear(h, w, b)  # noqa: E731
    return x + f(ln(x)) if norm_first else ln(x + f(x))


def test_residual_solution_passes_both_placements():
    result = check_residual(residual)
    assert result and "post-norm and pre-norm" in result.message


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_reference_follows_the_formulas(norm_first):
    x, w, b = torch.randn(2, 3, 5), torch.randn(5, 5), torch.randn(5)
    assert torch.allclose(_reference_residual(x, w, b, norm_first), residual(x, w, b, norm_first), atol=1e-5)


def test_residual_swapped_placements_get_the_swap_hint():
    result = check_residual(lambda x, w, b, nf: residual(x, w, b, not nf))
    assert not result and "post-norm (norm_first=False)" in result.message and "swapped" in result.message


def test_residual_without_skip_gets_its_hint():
    ln = lambda h: F.layer_norm(h, h.shape[-1:])  # noqa: E731
    result = check_residual(lambda x, w, b, nf: F.linear(ln(x), w, b) if nf else ln(F.linear(x, w, b)))
    assert not result and "skip" in result.message


def test_residual_pre_norm_normalized_skip_gets_its_hint():
    ln = lambda h: F.layer_norm(h, h.shape[-1:])  # noqa: E731
    result = check_residual(lambda x, w, b, nf: ln(x) + F.linear(ln(x), w, b) if nf else residual(x, w, b, nf))
    assert not result and "pre-norm" in result.message and "un-normalized" in result.message


# ----------------------------------------------------------------------------- exercise 4: predict, then run
def test_model_ffn_share_prediction_right_answer_passes_and_the_blocks_share_is_explained():
    import torch

    from transformer_lib.exercises.encoder_decoder import explain_model_ffn_share_prediction
    from transformer_lib.models.configs import GPTConfig
    from transformer_lib.models.transformer import GPT

    V, P, L, d, f = 50257, 1024, 12, 768, 3072  # GPT-2 small
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=V, block_size=P, n_layers=L, n_heads=12, d_model=d, d_ff=f))
    # the closed form, independent of the library: embeddings, L blocks (attention, FFN, two LayerNorms), final norm
    ffn = 2 * d * f + f + d
    block = (4 * d * d + 4 * d) + ffn + 4 * d
    total = V * d + P * d + L * block + 2 * d
    assert total == 124_439_808  # GPT-2 small's published count
    assert explain_model_ffn_share_prediction(L * ffn / total, model)
    wrong = explain_model_ffn_share_prediction(ffn / block, model)
    assert not wrong and f"you predicted {ffn / block:.2f}" in wrong.message and "outside every block" in wrong.message
    assert not explain_model_ffn_share_prediction("two thirds", model)

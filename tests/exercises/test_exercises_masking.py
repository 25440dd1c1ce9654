"""Chapter 06 exercise checks: the right answer passes, common mistakes fail with a hint."""

import pytest
import torch

from transformer_lib.exercises.masking import (
    _reference_masked_softmax,
    _reference_padded_causal,
    check_causal_mask,
    check_masked_softmax,
    check_padded_causal_mask,
)


# ----------------------------------------------------------------------------- causal mask
def causal(t_q, t_k):
    i = torch.arange(t_q)[:, None] + (t_k - t_q)  # absolute position of each query
    return torch.arange(t_k)[None, :] <= i


def test_causal_mask_solution_passes():
    result = check_causal_mask(causal)
    assert result and "Correct." in repr(result)


def test_causal_solution_matches_torch_square_subsequent_mask():
    # independent reference: PyTorch's float mask, -inf above the diagonal
    ref = torch.nn.Transformer.generate_square_subsequent_mask(5)
    assert torch.equal(causal(5, 5), ~torch.isinf(ref))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda t_q, t_k: torch.ones(t_q, t_k, dtype=torch.bool).tril(), "start"),
        (lambda t_q, t_k: ~causal(t_q, t_k), "inverted"),
        (lambda t_q, t_k: torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q - 1), "diagonal"),
        (lambda t_q, t_k: torch.ones(t_q, t_k, dtype=torch.bool).triu(t_k - t_q), "see the future"),
    ],
)
def test_causal_mask_common_mistakes_get_their_hint(wrong, hint):
    result = check_causal_mask(wrong)
    assert not result and hint in result.message


def test_causal_mask_must_be_boolean():
    result = check_causal_mask(lambda t_q, t_k: causal(t_q, t_k).float())
    assert not result and "bool" in result.message


# ----------------------------------------------------------------------------- padded causal mask
def padded_causal(lengths, T):
    B = len(lengths)
    out = torch.zeros(B, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            for j in range(T):
                out[b, i, j] = j <= i and j < lengths[b]
    return out


def test_padded_causal_solution_passes():
    assert check_padded_causal_mask(padded_causal)


def test_padded_causal_reference_matches_the_loops():
    lengths = torch.tensor([4, 2, 3])
    assert torch.equal(_reference_padded_causal(lengths, 4), padded_causal(lengths, 4))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda lengths, T: torch.ones(len(lengths), T, T, dtype=torch.bool).tril(), "padding is not masked"),
        (
            lambda lengths, T: (torch.arange(T)[None, None, :] < lengths[:, None, None]).expand(len(lengths), T, T),
            "causal part is missing",
        ),
        (
            lambda lengths, T: padded_causal(lengths, T) & (torch.arange(T)[None, :, None] < lengths[:, None, None]),
            "blocked the padded queries",
        ),
    ],
)
def test_padded_causal_common_mistakes_get_their_hint(wrong, hint):
    result = check_padded_causal_mask(wrong)
    assert not result and hint in result.message


# ----------------------------------------------------------------------------- masked softmax
def masked_softmax(scores, keep):
    z = scores.float().masked_fill(~keep, float("-inf"))
    w = torch.softmax(z, dim=-1)
    return torch.nan_to_num(w, nan=0.0).to(scores.dtype)


def test_masked_softmax_solution_passes():
    assert check_masked_softmax(masked_softmax)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_masked_softmax_reference_is_a_softmax_over_kept_keys_only(dtype):
    scores = (torch.randn(4, 6) * 4 - 20).to(dtype)
    keep = torch.rand(4, 6) < 0.5
    keep[0], keep[1, 2] = False, True
    got = _reference_masked_softmax(scores, keep).float()
    for r in range(4):
        kept = keep[r].nonzero().flatten()
        want = torch.zeros(6)
        if len(kept):
            want[kept] = torch.softmax(scores[r, kept].double(), -1).float()
        assert torch.allclose(got[r], want, atol=1e-2), (r, got[r], want)


def test_masked_softmax_nan_rows_get_their_hint():
    wrong = lambda s, k: torch.softmax(s.float().masked_fill(~k, float("-inf")), -1).to(s.dtype)  # noqa: E731
    result = check_masked_softmax(wrong)
    assert not result and "NaN" in result.message and "divides 0 by 0" in result.message


def test_masked_softmax_uniform_rows_get_their_hint():
    wrong = lambda s, k: torch.softmax(s.float().masked_fill(~k, -3e38), -1).to(s.dtype)  # noqa: E731
    result = check_masked_softmax(wrong)
    assert not result and "uniform" in result.message


# ----------------------------------------------------------------------------- exercise 4: predict, then run
def _flipped_call():
    from transformer_lib.experiments.mask_conventions import torch_mha_from
    from transformer_lib.blocks.multihead import MultiHeadAttention

    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    keep = torch.ones(2, 5, dtype=torch.bool)
    keep[1, 3:] = False
    with torch.no_grad():
        _, w = torch_mha_from(MultiHeadAttention(16, 4))(
            x, x, x, key_padding_mask=keep, need_weights=True, average_attn_weights=False
        )
    return w, keep


def test_flipped_mask_prediction_right_answer_passes_and_explains():
    from transformer_lib.exercises.masking import explain_flipped_mask_prediction

    w, keep = _flipped_call()
    result = explain_flipped_mask_prediction(0.0, w, keep)
    assert result and "ignore" in result.message and "NaN" in result.message


def test_flipped_mask_prediction_wrong_answer_is_explained():
    from transformer_lib.exercises.masking import explain_flipped_mask_prediction

    w, keep = _flipped_call()
    result = explain_flipped_mask_prediction(1.0, w, keep)
    assert not result and "you predicted 1.00" in result.message and "~keep" in result.message
    assert not explain_flipped_mask_prediction("all", w, keep)

"""Masks: causal and padding masks equal their definitions and PyTorch's; conversions keep the meaning."""

import pytest
import torch
import torch.nn as nn

from transformer_lib.blocks.masking import (
    causal_mask,
    check_mask,
    combine_masks,
    key_padding_to_attention,
    padding_mask,
    padding_mask_from_ids,
    to_additive,
    to_boolean,
)


def test_square_causal_mask_matches_torch_subsequent_mask():
    # torch's float mask: 0 where allowed, -inf on the future
    expected = nn.Transformer.generate_square_subsequent_mask(6) == 0
    assert torch.equal(causal_mask(6), expected)


@pytest.mark.parametrize("t_q,t_k", [(1, 1), (1, 5), (3, 7), (4, 4), (0, 3)])
def test_causal_mask_aligns_queries_to_the_end_of_the_keys(t_q, t_k):
    expected = torch.tensor([[j <= i + (t_k - t_q) for j in range(t_k)] for i in range(t_q)], dtype=torch.bool)
    assert torch.equal(causal_mask(t_q, t_k), expected.reshape(t_q, t_k))


def test_causal_mask_rejects_more_queries_than_keys():
    with pytest.raises(ValueError, match=r"t_k must be an int >= 5 .*got 3"):  # t_q = 5 queries need >= 5 keys
        causal_mask(5, 3)


def test_padding_mask_marks_real_tokens():
    lengths = torch.tensor([3, 1, 4])
    expected = torch.tensor([[i < n for i in range(5)] for n in (3, 1, 4)])
    assert torch.equal(padding_mask(lengths, 5), expected)
    assert padding_mask(lengths).shape == (3, 4)
    ids = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0]])
    assert torch.equal(padding_mask_from_ids(ids, pad_id=0), torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]]).bool())


def test_padding_mask_rejects_bad_lengths():
    with pytest.raises(ValueError, match=r"max_len must be an int >= 3 \(the longest length\), got 2"):
        padding_mask(torch.tensor([3, 1]), 2)
    with pytest.raises(ValueError, match=r"lengths must be a tensor of shape \(any,\) \(B lengths\), got \(2, 1\)"):
        padding_mask(torch.tensor([[3], [1]]))
    with pytest.raises(ValueError, match=r"key_mask must be a tensor of shape \(any, any\) \(B, Tk\), got \(4,\)"):
        key_padding_to_attention(torch.ones(4, dtype=torch.bool))


def test_combined_boolean_masks_are_the_logical_and():
    causal = causal_mask(4)
    pad = padding_mask(torch.tensor([4, 2]))  # (B, Tk)
    combined = combine_masks(causal, key_padding_to_attention(pad), None)  # (B, 1, Tq, Tk)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert combined[b, 0, i, j] == (j <= i and bool(pad[b, j]))
    assert combine_masks(None, None) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_additive_masks_use_the_dtype_minimum_not_minus_1e9(dtype):
    mask = causal_mask(3)
    add = to_additive(mask, dtype)
    assert add.dtype == dtype
    assert torch.isfinite(add).all()  # -1e9 would be -inf in fp16
    assert (add[mask] == 0).all() and (add[~mask] == torch.finfo(dtype).min).all()
    assert torch.equal(to_boolean(add), mask)
    # two masked entries summed must not overflow to -inf
    both = combine_masks(add, add)
    assert torch.isfinite(both).all() and torch.equal(to_boolean(both), mask)


def test_mixed_boolean_and_additive_masks_sum():
    bias = torch.tensor([[0.0, -1.0, -2.0], [-0.5, 0.0, -3.0]])
    keep = torch.tensor([[True, False, True], [True, True, True]])
    combined = combine_masks(bias, keep)
    expected = bias.masked_fill(~keep, torch.finfo(torch.float32).min)
    torch.testing.assert_close(combined, expected, atol=0, rtol=1e-6)


def test_check_mask_rejects_wrong_dtype_and_shape():
    with pytest.raises(
        ValueError, match=r"attn_mask must be a torch.bool or torch.float16 or .* tensor, got torch.int64"
    ):
        check_mask(torch.ones(3, 4, dtype=torch.long), (2, 3, 4), "attn_mask")
    with pytest.raises(
        ValueError,
        match=r"mask must be a tensor that broadcasts to \(2, 3, 4\) .*got \(4, 3\)",
    ):
        check_mask(torch.ones(4, 3, dtype=torch.bool), (2, 3, 4))
    # a mask that would broadcast the scores to a larger shape is wrong too
    with pytest.raises(ValueError, match=r"\(5, 3, 4\)"):
        check_mask(torch.ones(5, 3, 4, dtype=torch.bool), (2, 3, 4))
    check_mask(torch.ones(3, 4, dtype=torch.bool), (2, 3, 4))  # broadcastable: fine

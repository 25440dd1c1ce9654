"""Chapter 02's score-scale measurement (experiments.score_scale) against closed forms: the variance of q.k under
nn.Linear's default initialisation, and layers whose scores are known exactly (all zero, all huge)."""

import math

import pytest
import torch

from transformer_lib import MultiHeadAttention
from transformer_lib.experiments.score_scale import init_score_variance, score_stats


def test_init_score_variance_is_the_closed_form_for_default_linear_init():
    # U(-b, b) has variance b^2 / 3; with b = 1/sqrt(512) a query entry has variance 1/3 + 1/1536
    assert init_score_variance(512, 64) == pytest.approx(64 * (1 / 3 + 1 / 1536) ** 2)
    assert init_score_variance(512, 64, bias=False) == pytest.approx(64 / 9)


def test_measured_scores_of_a_fresh_layer_match_the_closed_form():
    torch.manual_seed(0)
    mha = MultiHeadAttention(512, 8)
    stats = score_stats(mha, torch.randn(32, 16, 512))
    assert stats.d_head == 64 and stats.n_rows == 32 * 8 * 16
    assert stats.q_var == pytest.approx(1 / 3, rel=0.1)
    assert stats.raw_var == pytest.approx(init_score_variance(512, 64), rel=0.15)
    assert stats.scaled_var == pytest.approx(stats.raw_var / 64, rel=1e-4)


def test_zero_scores_give_uniform_rows_and_huge_scores_give_one_hot_rows():
    mha = MultiHeadAttention(8, 2)
    with torch.no_grad():
        mha.qkv.weight.zero_()
        mha.qkv.bias.zero_()
    x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(0))
    flat = score_stats(mha, x)
    assert flat.raw_var == 0 and flat.one_hot_raw == 0 and flat.max_weight_raw == pytest.approx(1 / 5)
    with torch.no_grad():  # q = k = 100 * x: every row's own score towers over the rest
        mha.qkv.weight.copy_(100 * torch.eye(8).repeat(3, 1))
    sharp = score_stats(mha, x)
    assert sharp.one_hot_raw == 1.0 and sharp.max_weight_raw == pytest.approx(1.0)
    assert sharp.scaled_var == pytest.approx(sharp.raw_var / math.sqrt(4) ** 2, rel=1e-5)


def test_score_stats_rejects_a_wrong_width():
    with pytest.raises(
        ValueError, match=r"x must be a tensor of shape \(B, T, 8\) \(\(B, T, d_model=8\)\), got \(1, 3, 6\)"
    ):
        score_stats(MultiHeadAttention(8, 2), torch.randn(1, 3, 6))

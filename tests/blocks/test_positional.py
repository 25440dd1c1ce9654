"""Positional information against the papers' formulas: sinusoidal (Vaswani et al. 2017), RoPE (Su et al. 2021),
ALiBi (Press et al. 2022)."""

import math

import pytest
import torch

from transformer_lib.blocks.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    sinusoidal_table,
)


# ----------------------------------------------------------------------------- sinusoidal
def test_sinusoidal_table_is_the_papers_formula():
    max_len, d = 50, 16
    table = sinusoidal_table(max_len, d)
    assert table.shape == (max_len, d)
    for pos in range(max_len):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert abs(table[pos, 2 * i].item() - math.sin(angle)) < 1e-6
            assert abs(table[pos, 2 * i + 1].item() - math.cos(angle)) < 1e-6


@pytest.mark.parametrize("k", [1, 3, 10, 37])
def test_sinusoidal_shift_is_a_fixed_rotation(k):
    # PE(pos + k) = M_k PE(pos), M_k block-diagonal with one 2x2 rotation per frequency: the paper's argument
    # that relative positions are easy to attend to.
    max_len, d = 100, 16
    table = sinusoidal_table(max_len, d).double()
    m_k = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        w = 1 / 10000 ** (2 * i / d)
        c, s = math.cos(k * w), math.sin(k * w)
        # (sin, cos)(w (pos + k)) = [[c, s], [-s, c]] (sin, cos)(w pos)
        m_k[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    shifted = table[: max_len - k] @ m_k.T  # M_k PE(pos) for every pos
    torch.testing.assert_close(shifted, table[k:], atol=1e-5, rtol=0)


def test_sinusoidal_encoding_adds_the_table_with_an_offset():
    pe = SinusoidalPositionalEncoding(8, max_len=20)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(pe(x), x + sinusoidal_table(20, 8)[:5])
    torch.testing.assert_close(pe(x, offset=7), x + sinusoidal_table(20, 8)[7:12])
    assert pe(x.bfloat16()).dtype == torch.bfloat16
    assert not list(pe.parameters())  # fixed, not trained


def test_sequence_longer_than_the_table_is_rejected():
    pe = SinusoidalPositionalEncoding(8, max_len=10)
    with pytest.raises(ValueError, match=r"offset \+ T must be an int <= 10 \(the sinusoidal table's max_len.*got 11"):
        pe(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match=r"offset \+ T must be an int <= 10 .*got 12"):  # offset 4 + 8 new positions
        pe(torch.zeros(1, 8, 8), offset=4)
    learned = LearnedPositionalEmbedding(8, max_len=10)
    with pytest.raises(ValueError, match=r"offset \+ T must be an int <= 10 \(the learned positional .*got 11"):
        learned(torch.zeros(1, 11, 8))


def test_input_of_the_wrong_width_is_rejected():
    with pytest.raises(ValueError, match=r"x must be a tensor of shape \(B, T, 8\) \(B, T, d_model\), got \(1, 4, 6\)"):
        SinusoidalPositionalEncoding(8, max_len=10)(torch.zeros(1, 4, 6))
    with pytest.raises(ValueError, match=r"x must be a tensor of shape \(B, T, 8\) \(B, T, d_model\), got \(1, 4, 6\)"):
        LearnedPositionalEmbedding(8, max_len=10)(torch.zeros(1, 4, 6))
    with pytest.raises(
        ValueError, match=r"x must be a tensor of shape \(\.\.\., T, 8\) \(\.\.\., T, d_head\), got \(1, 2, 4, 6\)"
    ):
        RotaryEmbedding(8)(torch.zeros(1, 2, 4, 6))


def test_odd_d_model_is_rejected():
    with pytest.raises(
        ValueError, match=r"d_model must be an int >= 1, a multiple of 2 \(sin and cos come in pairs\), got 7"
    ):
        sinusoidal_table(10, 7)
    with pytest.raises(
        ValueError, match=r"d_head must be an int >= 2, a multiple of 2 \(RoPE rotates feature pairs\), got 7"
    ):
        RotaryEmbedding(7)


# ----------------------------------------------------------------------------- RoPE
def rope_complex(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's complex form: pair (x[2i], x[2i+1]) as x[2i] + i x[2i+1], times exp(i pos theta_i), in float64."""
    d = x.shape[-1]
    theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    pos = torch.arange(offset, offset + x.shape[-2], dtype=torch.float64)
    rot = torch.polar(torch.ones(len(pos), d // 2, dtype=torch.float64), pos[:, None] * theta[None, :])
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * rot).flatten(-2)


@pytest.mark.parametrize("offset", [0, 5])
def test_rope_equals_the_complex_number_formulation(offset):
    rope = RotaryEmbedding(16)
    x = torch.randn(2, 3, 9, 16)  # (B, H, T, d_head)
    torch.testing.assert_close(rope(x, offset=offset).double(), rope_complex(x, offset), atol=1e-5, rtol=1e-5)


def test_rope_preserves_norms():
    x = torch.randn(2, 3, 40, 16)
    y = RotaryEmbedding(16)(x)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)


def test_rope_dot_product_depends_only_on_the_offset():
    # the same q and the same k placed at every position: q_m . k_n must depend on m - n only
    rope, T = RotaryEmbedding(16), 12
    q, k = torch.randn(16), torch.randn(16)
    rq = rope(q.expand(1, 1, T, 16))[0, 0]  # (T, d): q rotated to positions 0..T-1
    rk = rope(k.expand(1, 1, T, 16))[0, 0]
    scores = rq @ rk.T  # scores[m, n] = q_m . k_n
    for delta in range(-T + 1, T):
        diagonal = torch.diagonal(scores, offset=-delta)  # all pairs with m - n = delta
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-4, rtol=1e-4)
    # and not a constant: different offsets give different scores
    assert torch.diagonal(scores, 0)[0] != torch.diagonal(scores, -1)[0]


def test_rope_keeps_the_dtype():
    x = torch.randn(1, 2, 4, 8, dtype=torch.bfloat16)
    y = RotaryEmbedding(8)(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), rope_complex(x.float()), atol=3e-2, rtol=3e-2)


# ----------------------------------------------------------------------------- ALiBi
def test_alibi_slopes_for_8_heads_are_the_papers():
    expected = torch.tensor([2.0 ** -(h + 1) for h in range(8)])
    torch.testing.assert_close(alibi_slopes(8), expected, atol=0, rtol=1e-6)


def test_alibi_slopes_for_other_head_counts():
    # powers of two: geometric from 2^(-8/n); otherwise (the authors' code): the slopes of the closest lower power
    # of two, then every other slope of the next power of two.
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]))
    torch.testing.assert_close(alibi_slopes(6), torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]))
    torch.testing.assert_close(
        alibi_slopes(12), torch.tensor([2.0 ** -(h + 1) for h in range(8)] + [2.0 ** -(h + 0.5) for h in range(4)])
    )


@pytest.mark.parametrize("t_q,t_k", [(5, 5), (2, 6)])
def test_alibi_bias_is_minus_slope_times_distance(t_q, t_k):
    n_heads = 8
    bias = alibi_bias(n_heads, t_q, t_k)
    assert bias.shape == (n_heads, t_q, t_k)
    for h in range(n_heads):
        slope = 2.0 ** -(h + 1)
        for qi in range(t_q):
            i = qi + t_k - t_q  # the query's absolute position (queries are the last t_q positions)
            for j in range(t_k):
                expected = -slope * (i - j) if j <= i else 0.0
                assert abs(bias[h, qi, j].item() - expected) < 1e-6


@pytest.mark.parametrize("dtype", [torch.long, torch.bool, torch.int32])
def test_alibi_bias_refuses_a_non_floating_dtype(dtype):
    with pytest.raises(ValueError, match=rf"dtype must be a floating-point torch.dtype, got {dtype}"):
        alibi_bias(4, 3, dtype=dtype)
    assert alibi_bias(4, 3, dtype=torch.float16).dtype == torch.float16


@pytest.mark.parametrize(
    "module, shape",
    [
        (SinusoidalPositionalEncoding(8, 16), (1, 3, 8)),
        (LearnedPositionalEmbedding(8, 16), (1, 3, 8)),
        (RotaryEmbedding(8), (1, 2, 3, 8)),
    ],
    ids=["sinusoidal", "learned", "rope"],
)
def test_positional_encodings_refuse_integer_input(module, shape):
    with pytest.raises(ValueError, match=r"x must be a floating-point tensor, got torch.int64"):
        module(torch.ones(shape, dtype=torch.long))

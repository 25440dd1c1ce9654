"""NF4 (Dettmers et al. 2023, QLoRA): the code book's defining properties checked with the standard library's
``statistics.NormalDist`` (an implementation independent of torch's), the paper's published values, the
nearest-level rounding against a brute-force search, and NF4 against int4 on Gaussian weights."""

from statistics import NormalDist

import pytest
import torch

from transformer_lib.quant.nf4 import (
    NF4_OFFSET,
    NF4Tensor,
    compare_nf4_int4,
    nf4_code_book,
    nf4_dequantize,
    nf4_quantize,
)

# QLoRA, Appendix E ("NormalFloat 4-bit data type"): the exact values of NF4, as printed there.
PUBLISHED_NF4 = [
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
]


def test_code_book_shape_order_zero_and_endpoints():
    code = nf4_code_book(torch.float64)
    assert code.shape == (16,)
    assert (code.diff() > 0).all()
    assert code[0].item() == -1.0 and code[-1].item() == 1.0
    assert (code == 0).sum().item() == 1  # zero exactly representable
    assert (code > 0).sum().item() == 8 and (code < 0).sum().item() == 7  # the asymmetric halves


def test_each_half_is_equally_spaced_in_normal_probability():
    code = nf4_code_book(torch.float64).tolist()
    N = NormalDist()
    top = N.inv_cdf(NF4_OFFSET)  # the quantile that the level 1.0 stands for
    pos = [N.cdf(v * top) for v in code if v > 0]  # 8 probabilities, rising to NF4_OFFSET
    neg = [N.cdf(-v * top) for v in code if v < 0]  # 7 mirrored probabilities, falling from NF4_OFFSET
    step_pos, step_neg = (NF4_OFFSET - 0.5) / 8, (NF4_OFFSET - 0.5) / 7
    assert pos == pytest.approx([0.5 + step_pos * k for k in range(1, 9)], abs=1e-12)
    assert neg == pytest.approx([NF4_OFFSET - step_neg * k for k in range(7)], abs=1e-12)
    assert NF4_OFFSET == pytest.approx(0.9677083, abs=1e-7)  # the constant of bitsandbytes' create_normal_map


def test_code_book_matches_the_published_table():
    torch.testing.assert_close(
        nf4_code_book(torch.float64), torch.tensor(PUBLISHED_NF4, dtype=torch.float64), rtol=0, atol=1e-4
    )


def test_quantize_picks_the_nearest_level_of_each_block():
    w = torch.randn(8, 128, generator=torch.Generator().manual_seed(0))
    t = nf4_quantize(w, 64)
    assert t.codes.dtype == torch.uint8 and t.codes.numel() == w.numel() // 2  # two codes per byte
    blocks = w.reshape(-1, 64)
    absmax = blocks.abs().amax(dim=1, keepdim=True)  # (n_blocks, 1)
    code = nf4_code_book()
    nearest = code[(blocks / absmax)[..., None].sub(code).abs().argmin(dim=-1)]  # brute force over 16 levels
    torch.testing.assert_close(t.dequantize(), (nearest * absmax).reshape(w.shape))
    torch.testing.assert_close(t.absmax, absmax.squeeze(1))
    # the block's largest |w| sits on an endpoint (+-1 * absmax): stored exactly
    i = blocks.abs().argmax(dim=1)
    r = torch.arange(blocks.shape[0])
    assert torch.equal(t.dequantize().reshape(-1, 64)[r, i], blocks[r, i])


def test_zeros_stay_zero_and_dtype_and_shape_round_trip():
    w = torch.zeros(2, 64, dtype=torch.float16)
    w[0, 5] = 3.0
    out = nf4_dequantize(nf4_quantize(w), torch.float16)
    assert out.dtype == torch.float16 and out.shape == w.shape
    assert torch.equal(out, w)


def test_nf4_beats_int4_absmax_on_gaussian_weights():
    w = torch.randn(256, 256, generator=torch.Generator().manual_seed(1))
    errors = compare_nf4_int4(w, 64)
    assert set(errors) == {"nf4", "int4_absmax", "int4_zero_point"}
    assert errors["nf4"] < errors["int4_absmax"]


def test_nf4_bad_arguments_raise():
    with pytest.raises(
        ValueError,
        match=r"w.numel\(\) must be an int >= 1, a multiple of 64 \(whole blocks of block_size=64\), got 100",
    ):
        nf4_quantize(torch.randn(10, 10))
    with pytest.raises(
        ValueError, match=r"block_size must be an int >= 2, a multiple of 2 \(two codes per byte\), got 63"
    ):
        nf4_quantize(torch.randn(64), block_size=63)
    with pytest.raises(ValueError, match="w must be a floating-point tensor"):
        nf4_quantize(torch.ones(64, dtype=torch.int64))
    with pytest.raises(ValueError, match="finite"):
        nf4_quantize(torch.full((64,), float("inf")))
    with pytest.raises(TypeError, match="t must be an NF4Tensor"):
        nf4_dequantize(torch.zeros(3))
    assert isinstance(nf4_quantize(torch.randn(64)), NF4Tensor)

"""Quantization: round-trip error bounds (closed form), PyTorch's fake-quant ops as a reference, int4 packing,
``QuantLinear`` against ``F.linear`` with the dequantized weight, argument checks, and saved sizes from dtypes."""

import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib import GPT, GPTConfig
from transformer_lib.serving.generation import generate
from transformer_lib.quant import (
    QuantEmbedding,
    QuantLinear,
    fake_quantize,
    float32_int8_matmul,
    int8_kernel,
    int8_matmul,
    int_range,
    keep_outliers,
    pack_int4,
    padded_int_mm,
    quantize,
    quantize_model,
    quantize_per_token,
    unpack_int4,
)
from transformer_lib.quant.storage import saved_size, state_dict_bytes


def heavy_tailed(shape, gen, outlier_scale=20.0):
    """Gaussian values with a few large ones, as in trained weights and activations."""
    x = torch.randn(*shape, generator=gen)
    spikes = torch.rand(*shape, generator=gen) < 0.02
    return torch.where(spikes, x * outlier_scale, x)


def small_gpt(**kw):
    """A seeded, untrained GPT of ``GPTConfig``'s default sizes (every in_features a multiple of 32)."""
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=84, **kw)).eval()


# ----------------------------------------------------------------------------- round trip
@settings(max_examples=60, deadline=None)
@given(
    bits=st.sampled_from([4, 8]),
    symmetric=st.booleans(),
    setting=st.sampled_from([("tensor", None), ("channel", None), ("group", 4), ("group", 16)]),
    rows=st.integers(1, 6),
    groups=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    magnitude=st.sampled_from([1e-3, 1.0, 1e3]),
    shift=st.sampled_from([0.0, 2.0]),
)
def test_round_trip_error_is_at_most_half_a_scale(bits, symmetric, setting, rows, groups, seed, magnitude, shift):
    granularity, g = setting
    K = (g or 8) * groups
    x = (heavy_tailed((rows, K), torch.Generator().manual_seed(seed)) + shift) * magnitude
    qt = quantize(x, bits, symmetric, granularity, g)
    # closed form: |x - (q - z) s| <= s / 2 for every element, with s the scale of the element's group
    s = qt.scale.float()  # tensor: (1, 1); channel: (rows, 1); group: (rows, K // g)
    bound = (s.repeat_interleave(g, dim=1) if granularity == "group" else s) / 2  # broadcasts to (rows, K)
    err = (x - qt.dequantize()).abs()
    # plus float32 rounding of (q - z) * s, which grows with |x| (a zero point far from 0 makes |q - z| large)
    slack = 4 * torch.finfo(torch.float32).eps * (x.abs() + bound)
    assert (err <= bound * (1 + 1e-5) + slack + 1e-12).all(), (err / bound).max()
    qmin, qmax = int_range(bits, symmetric)
    assert qt.q.min() >= qmin and qt.q.max() <= qmax


@pytest.mark.parametrize("bits", [4, 8])
def test_absmax_matches_pytorch_fake_quantize_per_channel(bits):
    w = heavy_tailed((16, 32), torch.Generator().manual_seed(1))
    qmin, qmax = int_range(bits)
    scale = w.abs().amax(dim=1) / qmax  # closed form: max |w_row| / q_max
    ref = torch.fake_quantize_per_channel_affine(w, scale, torch.zeros(16, dtype=torch.int32), 0, qmin, qmax)
    qt = quantize(w, bits, symmetric=True, granularity="channel")
    torch.testing.assert_close(qt.scale.squeeze(1), scale)
    torch.testing.assert_close(qt.dequantize(), ref, rtol=0, atol=0)
    assert (qt.q.abs().amax(dim=1) == qmax).all()  # each row's largest weight uses the end of the grid


def test_zero_point_matches_pytorch_fake_quantize_per_tensor():
    x = torch.relu(heavy_tailed((8, 24), torch.Generator().manual_seed(2))) + 0.5  # lopsided: all >= 0
    qt = quantize(x, 8, symmetric=False, granularity="tensor")
    lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
    assert qt.scale.item() == pytest.approx((hi - lo) / 255, rel=1e-6)
    ref = torch.fake_quantize_per_tensor_affine(x, qt.scale.item(), int(qt.zero.item()), 0, 255)
    torch.testing.assert_close(qt.dequantize(), ref, rtol=0, atol=0)
    assert qt.q.dtype == torch.uint8


def test_zero_point_stores_zero_exactly():
    x = torch.tensor([[-0.3, 0.0, 1.7, 0.0, 2.9]])
    qt = quantize(x, 8, symmetric=False, granularity="tensor")
    assert (qt.dequantize()[x == 0] == 0).all()


def test_zero_point_beats_absmax_on_a_one_sided_range():
    x = torch.rand(64, 64, generator=torch.Generator().manual_seed(3))  # all in [0, 1): absmax wastes the negatives
    err_sym = (x - fake_quantize(x, 8, True, "tensor")).abs().max()
    err_asym = (x - fake_quantize(x, 8, False, "tensor")).abs().max()
    assert err_asym < 0.6 * err_sym  # 255 steps over [0, 1] instead of 127


def test_finer_granularity_has_smaller_error():
    w = heavy_tailed((32, 128), torch.Generator().manual_seed(4))
    errs = [
        (w - fake_quantize(w, 4, True, gran, g)).pow(2).mean()
        for gran, g in [("tensor", None), ("channel", None), ("group", 32), ("group", 8)]
    ]
    assert errs == sorted(errs, reverse=True)


def test_float16_scales_keep_the_bound():
    x = heavy_tailed((8, 64), torch.Generator().manual_seed(5)) * 0.037
    for sym in (True, False):
        qt = quantize(x, 4, sym, "group", 16, scale_dtype=torch.float16)
        assert qt.scale.dtype == torch.float16
        bound = qt.scale.float().repeat_interleave(16, dim=1) / 2
        assert ((x - qt.dequantize()).abs() <= bound * (1 + 1e-6)).all()


def test_all_zero_group_round_trips_exactly():
    x = torch.zeros(2, 8)
    x[1, :4] = torch.tensor([1.0, -2.0, 0.5, 0.0])
    qt = quantize(x, 4, True, "group", 4)
    assert torch.isfinite(qt.scale).all()
    assert (qt.dequantize()[0] == 0).all()


# ----------------------------------------------------------------------------- int4 packing
def test_pack_int4_nibble_layout():
    q = torch.tensor([[1, -1, 7, -8]], dtype=torch.int8)
    # byte 0: low nibble 1, high nibble 0b1111 (-1) -> 0xF1; byte 1: low 7, high 0b1000 (-8) -> 0x87
    assert pack_int4(q).tolist() == [[0xF1, 0x87]]


def test_unpack_then_pack_is_the_identity_on_every_byte():
    every_byte = torch.arange(256, dtype=torch.uint8).reshape(16, 16)
    assert torch.equal(pack_int4(unpack_int4(every_byte)), every_byte)


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 5), half=st.integers(1, 20), seed=st.integers(0, 1000))
def test_pack_then_unpack_round_trips(rows, half, seed):
    q = torch.randint(-8, 8, (rows, 2 * half), generator=torch.Generator().manual_seed(seed)).to(torch.int8)
    packed = pack_int4(q)
    assert packed.dtype == torch.uint8 and packed.shape == (rows, half)
    assert torch.equal(unpack_int4(packed), q)


@pytest.mark.parametrize(
    "bad",
    [
        torch.zeros(2, 3, dtype=torch.int8),
        torch.full((1, 2), 8, dtype=torch.int8),
        torch.zeros(1, 2, dtype=torch.int32),
    ],
)
def test_pack_int4_rejects_bad_input(bad):
    with pytest.raises(ValueError, match=r"q(\.shape\[-1\]|\.max\(\))? must"):
        pack_int4(bad)


# ----------------------------------------------------------------------------- QuantLinear
def dequantize_by_hand(layer: QuantLinear) -> torch.Tensor:
    """The float weight a QuantLinear stands for, rebuilt from its buffers without the library's helpers."""
    q = layer.qweight.to(torch.int16)
    if layer.bits == 4:
        lo, hi = q & 0xF, q >> 4
        q = torch.stack([lo, hi], -1).flatten(-2)
        q = torch.where(q >= 8, q - 16, q)
    return q.float() * layer.scale.float().repeat_interleave(layer.in_features // layer.scale.shape[1], dim=1)


@pytest.mark.parametrize("bits, group_size", [(8, None), (8, 16), (4, None), (4, 32), (4, 8)])
def test_quant_linear_matches_f_linear_with_dequantized_weight(bits, group_size):
    lin = torch.nn.Linear(64, 48)
    layer = QuantLinear.from_linear(lin, bits, group_size)
    x = torch.randn(3, 5, 64)
    w_hat = dequantize_by_hand(layer)
    torch.testing.assert_close(layer(x), F.linear(x, w_hat, lin.bias), rtol=1e-5, atol=1e-6)
    # the stored codes are the closed form round(w / s), s = max|group| / q_max rounded up to float16
    g = 64 if group_size is None else group_size
    s = layer.scale.float().repeat_interleave(g, dim=1)  # (48, 64)
    assert torch.equal(w_hat / s, torch.round(lin.weight.detach() / s))
    qmax = int_range(bits)[1]
    amax = lin.weight.detach().reshape(48, -1, g).abs().amax(-1)  # (48, n_groups)
    assert (layer.scale.float() >= amax / qmax).all() and (layer.scale.float() <= amax / qmax * (1 + 2**-10)).all()
    assert layer.qweight.dtype == (torch.int8 if bits == 8 else torch.uint8)
    assert layer.qweight.shape == (48, 64 if bits == 8 else 32)


def test_int8_matmul_is_exact():
    gen = torch.Generator().manual_seed(6)
    a = torch.randint(-127, 128, (5, 96), generator=gen).to(torch.int8)
    b = torch.randint(-127, 128, (40, 96), generator=gen).to(torch.int8)
    out = int8_matmul(a, b)
    assert out.dtype == torch.int32
    assert torch.equal(out.long(), a.long() @ b.long().t())


def int8_pair(M, K, N, seed, extreme=False):
    """Random int8 matrices ``(M, K)`` and ``(N, K)``; ``extreme``: every entry +-127, the largest sums."""
    gen = torch.Generator().manual_seed(seed)
    if extreme:
        sign = lambda *shape: torch.randint(0, 2, shape, generator=gen) * 2 - 1  # noqa: E731
        return (127 * sign(M, K)).to(torch.int8), (127 * sign(N, K)).to(torch.int8)
    return (
        torch.randint(-127, 128, (M, K), generator=gen).to(torch.int8),
        torch.randint(-127, 128, (N, K), generator=gen).to(torch.int8),
    )


@pytest.mark.parametrize("M, K, N", [(1, 64, 32), (1, 7, 3), (5, 30, 13), (16, 96, 40), (17, 8, 8), (3, 1000, 9)])
@pytest.mark.parametrize("extreme", [False, True])
def test_padded_int_mm_is_exact_on_cpu(M, K, N, extreme):
    # the zero-padding that CUDA's small-M path takes, checked here against an int64 product
    a, b = int8_pair(M, K, N, M * K + N, extreme)
    out = padded_int_mm(a, b)
    assert out.dtype == torch.int32 and out.shape == (M, N)
    assert torch.equal(out.long(), a.long() @ b.long().t())


def test_int8_matmul_refuses_mixed_devices_and_dtypes():
    with pytest.raises(ValueError, match=r"wq must be a tensor of shape \(any, 8\) \(N, K of xq\), got \(3, 7\)"):
        padded_int_mm(torch.zeros(2, 8, dtype=torch.int8), torch.zeros(3, 7, dtype=torch.int8))
    with pytest.raises(ValueError, match="xq must be a torch.int8 tensor, got torch.float32"):
        int8_matmul(torch.zeros(2, 8), torch.zeros(3, 8, dtype=torch.int8))


@pytest.mark.parametrize("M, K, N", [(1, 64, 32), (5, 30, 13), (7, 1024, 9), (3, 1025, 4), (4, 3000, 6)])
@pytest.mark.parametrize("extreme", [False, True])
def test_float32_int8_matmul_gives_the_integers_of_an_int64_product(M, K, N, extreme):
    a, b = int8_pair(M, K, N, 3 * M + K + N, extreme)
    for out in (float32_int8_matmul(a, b), int8_matmul(a, b, kernel="float32")):
        assert out.dtype == torch.int32 and out.shape == (M, N)
        assert torch.equal(out.long(), a.long() @ b.long().t())


def test_float32_int8_matmul_is_exact_where_one_float32_product_is_not():
    # same-sign sums pass 2^24 = 16,777,216 (3000 * 127^2 = 48,387,000): one float32 product over all of K rounds
    # them, the 1,024-input chunks do not; -128 * -128 * 1024 = 2^24 exactly, the largest chunk sum
    a, b = torch.full((2, 3000), 127, dtype=torch.int8), torch.full((3, 3000), 127, dtype=torch.int8)
    a[:, ::7] = -128
    exact = a.long() @ b.long().t()
    assert not torch.equal((a.float() @ b.float().t()).long(), exact)
    assert torch.equal(float32_int8_matmul(a, b).long(), exact)
    low = torch.full((1, 1024), -128, dtype=torch.int8)
    assert float32_int8_matmul(low, low).item() == 2**24


def test_float32_int8_matmul_refuses_reduced_float32_precision():
    a, b = int8_pair(2, 16, 3, 0)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        with pytest.raises(RuntimeError, match="needs full float32 products.*'high'"):
            float32_int8_matmul(a, b)
    finally:
        torch.set_float32_matmul_precision(before)
    with pytest.raises(ValueError, match=r"kernel must be one of \['float32', 'int_mm'\], got 'fp32'"):
        int8_matmul(a, b, kernel="fp32")


def test_int8_kernel_switches_w8a8_layers_for_a_block_with_the_same_outputs():
    model = quantize_model(small_gpt(), bits=8, act_bits=8)
    w8a8 = [m for m in model.modules() if isinstance(m, QuantLinear) and m.act_bits == 8]
    assert w8a8 and all(m.int8_kernel == "int_mm" for m in w8a8)
    idx = torch.randint(0, model.cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = model(idx)[0]  # logits
        with int8_kernel(model, "float32") as same:
            assert same is model and all(m.int8_kernel == "float32" for m in w8a8)
            assert torch.equal(model(idx)[0], ref)  # the same int32 sums, the same rescaling: bit for bit
    assert all(m.int8_kernel == "int_mm" for m in w8a8)
    with pytest.raises(KeyError), int8_kernel(model, "float32"):
        raise KeyError("a failure inside the block")
    assert all(m.int8_kernel == "int_mm" for m in w8a8)  # restored after the failure too
    with pytest.raises(ValueError, match="kernel must be one of"), int8_kernel(model, "int4"):
        pass
    assert all(m.int8_kernel == "int_mm" for m in w8a8)


@pytest.mark.cuda
def test_float32_int8_matmul_on_cuda_is_exact():
    a, b = int8_pair(5, 3000, 7, 1, extreme=True)
    out = float32_int8_matmul(a.cuda(), b.cuda())
    assert out.is_cuda and torch.equal(out.cpu().long(), a.long() @ b.long().t())


@pytest.mark.cuda
@pytest.mark.parametrize("M, K, N", [(1, 64, 32), (1, 7, 3), (4, 30, 13), (16, 96, 40), (17, 64, 32), (1, 4096, 4096)])
@pytest.mark.parametrize("extreme", [False, True])
def test_int8_matmul_on_cuda_is_exact_for_decoding_shapes(M, K, N, extreme):
    a, b = int8_pair(M, K, N, M + K + N, extreme)
    out = int8_matmul(a.cuda(), b.cuda())
    assert out.dtype == torch.int32 and out.is_cuda
    assert torch.equal(out.cpu().long(), a.long() @ b.long().t())


@pytest.mark.cuda
def test_w8a8_decode_step_on_cuda_matches_cpu():
    lin = torch.nn.Linear(96, 40)
    layer = QuantLinear.from_linear(lin, 8, act_bits=8)
    x = torch.randn(1, 1, 96)  # one decoding position: M = 1
    torch.testing.assert_close(copy.deepcopy(layer).cuda()(x.cuda()).cpu(), layer(x), rtol=1e-5, atol=1e-5)


def test_w8a8_quant_linear_matches_per_token_fake_quantization():
    lin = torch.nn.Linear(64, 32)
    layer = QuantLinear.from_linear(lin, 8, None, act_bits=8)
    x = heavy_tailed((2, 7, 64), torch.Generator().manual_seed(7))
    x_hat = fake_quantize(x, 8, True, "channel")  # one absmax scale per token (row): the closed form
    xq, sx = quantize_per_token(x.reshape(-1, 64))
    torch.testing.assert_close(xq.float() * sx, x_hat.reshape(-1, 64), rtol=1e-6, atol=1e-7)
    ref = F.linear(x_hat, dequantize_by_hand(layer), lin.bias)
    torch.testing.assert_close(layer(x), ref, rtol=1e-4, atol=1e-5)


def test_quant_linear_keeps_the_input_dtype():
    layer = QuantLinear.from_linear(torch.nn.Linear(32, 16), 4, 16)
    x = torch.randn(2, 32, dtype=torch.bfloat16)
    y = layer(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), layer(x.float()), rtol=0.05, atol=0.05)


# ----------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize("bits", [2, 3, 16, 8.0, "8"])
def test_bits_outside_4_and_8_raise(bits):
    # a float or a string is the wrong type (TypeError); another int the wrong value (ValueError)
    error, match = (
        (ValueError, r"bits must be one of \[4, 8\]") if isinstance(bits, int) else (TypeError, "bits must be an int")
    )
    with pytest.raises(error, match=match):
        quantize(torch.randn(4, 8), bits)
    with pytest.raises(error, match=match):
        QuantLinear(8, 4, bits=bits)
    with pytest.raises(error, match=match):
        quantize_model(small_gpt(), bits=bits)


def test_group_size_must_divide_the_dimension():
    with pytest.raises(
        ValueError, match=r"x.shape\[-1\] must be an int, a multiple of 5 \(whole groups of group_size=5\), got 24"
    ):
        quantize(torch.randn(4, 24), 4, granularity="group", group_size=5)
    with pytest.raises(
        ValueError, match=r"in_features must be an int >= 1, a multiple of 5 \(whole groups of group_size=5\), got 24"
    ):
        QuantLinear(24, 8, bits=4, group_size=5)
    model = small_gpt()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(
        ValueError,
        match=r"in_features must be an int, a multiple of 96 \(group_size=96 must divide every layer's in_features\), "
        r"got 128",
    ):
        quantize_model(model, bits=4, group_size=96)
    assert all(isinstance(m, torch.nn.Linear) for m in (model.lm_head, model.blocks[0].ffn.up))  # nothing changed
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_other_bad_arguments_raise():
    with pytest.raises(ValueError, match="granularity must be one of"):
        quantize(torch.randn(4, 8), 8, granularity="row")
    with pytest.raises(ValueError, match="x must be a floating-point"):
        quantize(torch.ones(4, 8, dtype=torch.int64))
    with pytest.raises(
        ValueError,
        match=r"\(bits, group_size\) must be \(8, None\) \(act_bits=8 needs int8 per channel\), got \(4, 16\)",
    ):
        QuantLinear(32, 8, bits=4, group_size=16, act_bits=8)
    with pytest.raises(ValueError, match=r"act_bits must be 8 \(int8 activations; None: weight-only\), got 4"):
        QuantLinear(32, 8, act_bits=4)
    with pytest.raises(
        ValueError, match=r"x must be a tensor of shape \(\.\.\., 32\) \(\.\.\., in_features\), got \(2, 31\)"
    ):
        QuantLinear(32, 8)(torch.randn(2, 31))
    with pytest.raises(ValueError, match=r"n_outliers must be an int in \[0, 7\] \(fewer than K=8\), got 8"):
        keep_outliers(torch.randn(4, 8), 8)


# ----------------------------------------------------------------------------- whole model
def test_quantize_model_keeps_the_tie_between_embedding_and_head():
    model = quantize_model(small_gpt(), bits=4, group_size=32)
    assert isinstance(model.tok_emb, QuantEmbedding) and isinstance(model.lm_head, QuantLinear)
    assert model.tok_emb.qweight.data_ptr() == model.lm_head.qweight.data_ptr()
    idx = torch.tensor([[0, 5, 83, 5]])
    torch.testing.assert_close(model.tok_emb(idx), model.lm_head.dequantized_weight()[idx])


def test_skipped_head_stays_float_and_tied():
    model = quantize_model(small_gpt(), bits=8, skip=("lm_head",))
    assert type(model.lm_head) is torch.nn.Linear and type(model.tok_emb) is torch.nn.Embedding
    assert model.lm_head.weight is model.tok_emb.weight
    assert isinstance(model.blocks[0].ffn.up, QuantLinear)


@pytest.mark.parametrize(
    "bits, group_size, act_bits, max_rel", [(8, None, None, 0.02), (8, None, 8, 0.03), (4, 32, None, 0.25)]
)
def test_quantized_gpt_stays_close_and_decodes_with_a_cache(bits, group_size, act_bits, max_rel):
    model = small_gpt()
    q = quantize_model(copy.deepcopy(model), bits, group_size, act_bits)
    idx = torch.randint(0, 84, (2, 40))
    ref, out = model(idx)[0], q(idx)[0]
    assert ((out - ref).norm() / ref.norm()) < max_rel
    prompt = idx[:, :8]
    torch.testing.assert_close(generate(q, prompt, 12), generate(q, prompt, 12, use_cache=False))


def test_saved_size_is_the_dtype_arithmetic():
    model = small_gpt()
    n_float = sum(p.numel() for p in model.parameters())  # tied weight counted once
    assert state_dict_bytes(model) == 4 * n_float
    for bits, g in [(8, None), (4, 128), (4, 32)]:
        q = quantize_model(copy.deepcopy(model), bits, g)
        expect = 0
        for name, p in model.named_parameters():  # the float model's tensors, by what quantization made of them
            lin = name.removesuffix(".weight")
            if name.endswith(".weight") and isinstance(q.get_submodule(lin), (QuantLinear, QuantEmbedding)):
                N, K = p.shape
                expect += N * K * bits // 8 + N * (1 if g is None else K // g) * 2  # codes + float16 scales
            else:
                expect += 4 * p.numel()  # biases, LayerNorms, position table stay float32
        assert state_dict_bytes(q) == expect
        size = saved_size(q)
        assert 0 < size - expect < 16_000  # the safetensors header (names, shapes, offsets) only
    ratios = {
        (b, g): saved_size(quantize_model(copy.deepcopy(model), b, g)) / saved_size(model)
        for b, g in [(8, None), (4, 128)]
    }
    assert ratios[(8, None)] <= 0.29 and ratios[(4, 128)] <= 0.16, ratios


# ----------------------------------------------------------------------------- outliers
def test_keeping_outlier_columns_reduces_activation_error():
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(256, 64, generator=gen)
    x[:, 3] *= 60  # one systematic outlier feature, as LLM.int8() describes
    base = (x - keep_outliers(x, 0)).pow(2).mean()
    torch.testing.assert_close(keep_outliers(x, 0), fake_quantize(x, 8, granularity="tensor"))
    kept = keep_outliers(x, 1)
    assert torch.equal(kept[:, 3], x[:, 3])  # the outlier column is untouched
    assert (x - kept).pow(2).mean() < base / 100  # the other columns get a 60x finer grid


@pytest.mark.cuda
def test_quant_linear_on_cuda_matches_cpu():
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(20, 64)
    for bits, g, a in [(8, None, None), (8, None, 8), (4, 16, None)]:
        layer = QuantLinear.from_linear(lin, bits, g, a)
        torch.testing.assert_close(layer.cuda()(x.cuda()).cpu(), layer.cpu()(x), rtol=1e-4, atol=1e-5)


def test_a_non_finite_weight_is_refused_before_any_layer_is_replaced():
    model = small_gpt(n_layers=2)
    with torch.no_grad():
        model.blocks[1].ffn.down.weight[3, 5] = float("inf")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"blocks.1.ffn.down.weight must be finite \(no NaN or inf\)"):
        quantize_model(model)
    assert not any(isinstance(m, (QuantLinear, QuantEmbedding)) for m in model.modules())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    with torch.no_grad():
        model.blocks[1].ffn.down.weight[3, 5] = 0.0
    assert isinstance(quantize_model(model).blocks[1].ffn.down, QuantLinear)  # the corrected retry

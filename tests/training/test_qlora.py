"""QLoRA's base (``transformer_lib.training.qlora``): the NF4 weight read back equals chapter 09's own
``nf4_dequantize`` bit
for bit, double quantization stays within float8 e4m3's rounding bound and stores the bytes of the closed form (and
of the paper's 0.127 bits per weight), gradients reach only the adapters, and they equal those of a float32 LoRA on
the dequantized weight."""

import copy
import math

import pytest
import torch
import torch.nn as nn

from transformer_lib.training.lora import LoRAConfig, LoRALinear, lora_layers
from transformer_lib.utils.params import count_parameters
from transformer_lib.quant.nf4 import nf4_code_book, nf4_dequantize, nf4_quantize
from transformer_lib.training.qlora import (
    NF4Linear,
    apply_qlora,
    double_dequantize,
    double_quantize,
    nf4_weight_bytes,
    qlora_linear,
)


def linear(n_in=384, n_out=1536, seed=0, bias=True):
    torch.manual_seed(seed)
    return nn.Linear(n_in, n_out, bias=bias)


def test_round_trip_equals_nf4_s_own_dequantization():
    lin = linear()
    ref = nf4_quantize(lin.weight)
    layer = NF4Linear.from_linear(lin, double_quant=False)
    assert torch.equal(layer.codes, ref.codes) and torch.equal(layer.absmax, ref.absmax)
    assert torch.equal(layer.dequantized_weight(), nf4_dequantize(ref))
    x = torch.randn(4, 7, 384)
    torch.testing.assert_close(layer(x), x @ nf4_dequantize(ref).T + lin.bias, atol=1e-5, rtol=1e-5)
    # and NF4 is a coarse copy of the weight: within half the widest gap between levels, times the block's absmax
    half_gap = nf4_code_book().diff().max() / 2
    err = (layer.dequantized_weight() - lin.weight).abs().view(-1, 64)
    assert (err <= ref.absmax[:, None] * half_gap * (1 + 1e-6)).all() and err.max() > 0


def test_double_quantization_keeps_the_codes_and_bounds_the_scale_error():
    lin = linear()
    ref = nf4_quantize(lin.weight)
    layer = NF4Linear.from_linear(lin)  # double_quant=True
    assert torch.equal(layer.codes, ref.codes)
    scales = layer.scales()
    # the weight is nf4's dequantization with the double-dequantized scales, bit for bit
    ref.absmax = scales
    assert torch.equal(layer.dequantized_weight(), nf4_dequantize(ref))
    absmax = nf4_quantize(lin.weight).absmax
    offset = absmax.mean()
    step = layer.absmax_scales.repeat_interleave(256)[: absmax.numel()]  # each scale's block scale
    centred = (absmax - offset) / step  # in [-448, 448]
    bound = torch.maximum(centred.abs() * 2**-4, torch.full_like(centred, 2**-10)) * step  # e4m3 half-ulp
    err = (scales - absmax).abs()
    assert (err <= bound * (1 + 1e-5) + 1e-8).all()
    assert err.max() > 0.1 * bound.max()  # the scales are rounded, not stored exactly
    assert (err / absmax).max() < 0.03  # trained-like weights: scales near their mean, a few percent at most


def test_double_quantize_round_trip_on_exact_values():
    """Values that float8 e4m3 holds exactly (after centring and scaling) come back exactly."""
    a = torch.tensor([1.0, 3.0, 2.5, 1.5, 2.0, 2.0, 2.0, 2.0])  # mean 2: the first block centres to +-448, +-224
    codes, scales, offset = double_quantize(a, block_size=4)
    assert codes.dtype == torch.uint8 and scales.shape == (2,) and offset.shape == (1,)
    back = double_dequantize(codes, scales, offset, 4)
    assert torch.equal(back, a)
    assert codes[4:].tolist() == [0] * 4 and scales[1] == 1  # a block equal to the mean stores zeros
    with pytest.raises(ValueError, match="absmax"):
        double_quantize(a.double())
    with pytest.raises(ValueError, match="block_size"):
        double_quantize(a, 0)


@pytest.mark.parametrize("shape", [(384, 384), (1536, 384), (384, 1536), (8, 64 * 300)])
@pytest.mark.parametrize("double_quant", [True, False])
def test_bytes_equal_the_closed_form(shape, double_quant):
    layer = NF4Linear(shape[1], shape[0], double_quant=double_quant)
    n = shape[0] * shape[1]
    assert layer.weight_bytes() == nf4_weight_bytes(n, 64, double_quant)
    blocks = n // 64
    expected = n / 2 + (blocks + 4 * math.ceil(blocks / 256) + 4 if double_quant else 4 * blocks)
    assert layer.weight_bytes() == expected
    total = sum(b.numel() * b.element_size() for name, b in layer.named_buffers() if name != "bias")
    assert layer.weight_bytes() == total  # every stored buffer but the bias is counted


def test_bits_per_weight_are_the_paper_s():
    """The paper's section 3: scales cost 32/64 = 0.5 bits per weight, double-quantized 8/64 + 32/(64*256) = 0.127."""
    n = 4096 * 4096
    single, double = nf4_weight_bytes(n, double_quant=False), nf4_weight_bytes(n)
    assert (single * 8 / n - 4) == 0.5
    assert abs((double * 8 / n - 4) - 0.127) < 5e-4
    assert double * 8 / n - 4 == 8 / 64 + 32 / (64 * 256) + 32 / n  # the last term: the mean's 4 bytes


def test_gradients_reach_only_the_adapters_and_equal_float32_lora_on_the_dequantized_weight():
    lin = linear(256, 128)
    q = qlora_linear(lin, r=4, alpha=8, generator=torch.Generator().manual_seed(0))
    assert not list(q.base.parameters())  # the NF4 base stores buffers only
    with torch.no_grad():
        q.lora_B.normal_(generator=torch.Generator().manual_seed(1))
    plain = nn.Linear(256, 128)
    with torch.no_grad():
        plain.weight.copy_(q.base.dequantized_weight())
        plain.bias.copy_(lin.bias)
    ref = LoRALinear(plain, r=4, alpha=8)
    with torch.no_grad():
        ref.lora_A.copy_(q.lora_A)
        ref.lora_B.copy_(q.lora_B)
    x = torch.randn(16, 256, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    q(x).pow(2).sum().backward()
    ref(x_ref).pow(2).sum().backward()
    assert q.lora_A.grad is not None and q.lora_A.grad.abs().sum() > 0
    torch.testing.assert_close(q.lora_A.grad, ref.lora_A.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(q.lora_B.grad, ref.lora_B.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-4, rtol=1e-4)  # the base passes gradients through
    assert [n for n, p in q.named_parameters() if p.requires_grad] == ["lora_A", "lora_B"]
    with pytest.raises(TypeError, match="nn.Linear base"):
        q.merge()


def test_bfloat16_input_runs_the_base_in_bfloat16_and_adapters_in_float32():
    q = qlora_linear(linear(128, 64), r=4, generator=torch.Generator().manual_seed(0))
    x = torch.randn(3, 128, dtype=torch.bfloat16)
    y = q(x)
    assert y.dtype == torch.bfloat16 and q.lora_A.dtype == torch.float32
    torch.testing.assert_close(y.float(), x.float() @ q.base.dequantized_weight().T + q.base.bias, atol=0.1, rtol=0.02)


def test_apply_qlora_on_minilm():
    from transformer_lib.models.pretrained import load_minilm

    model, tok = load_minilm(device="cpu")
    model = copy.deepcopy(model)
    n_linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    for m in (model.layers[0].self_attn.qkv, model.layers[5].ffn.down):  # trained weights, single-quantized scales
        assert torch.equal(
            NF4Linear.from_linear(m, double_quant=False).dequantized_weight(), nf4_dequantize(nf4_quantize(m.weight))
        )
    apply_qlora(
        model,
        LoRAConfig(r=8, alpha=16, target_modules=r".*\.(qkv|out|up|down)"),
        generator=torch.Generator().manual_seed(0),
    )
    layers = lora_layers(model)
    assert len(layers) == 24 and all(isinstance(m.base, NF4Linear) for m in layers.values())
    stored = sum(m.base.weight_bytes() for m in layers.values())
    expected = sum(nf4_weight_bytes(m.in_features * m.out_features) for m in layers.values())
    assert stored == expected and stored < 0.14 * 4 * n_linear  # about 4.13 of 32 bits
    trainable = count_parameters(model, trainable=True)
    assert trainable == sum(8 * (m.in_features + m.out_features) for m in layers.values())
    enc = tok.encode(["The cat sat on the mat.", "Hello!"])
    ours, _ = load_minilm(device="cpu")
    with torch.no_grad():
        y = model(**enc).last_hidden_state
        y0 = ours(**enc).last_hidden_state
    mask = enc["attention_mask"].bool()
    cos = torch.nn.functional.cosine_similarity(y[mask], y0[mask], dim=-1)
    assert cos.min() > 0.9  # B = 0: the 4-bit model alone, close to the float one


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="linear"):
        NF4Linear.from_linear(nn.GELU())
    with pytest.raises(ValueError, match="block_size"):
        NF4Linear(10, 3)  # 30 weights: not a multiple of 64
    with pytest.raises(ValueError, match="in_features=64"):
        NF4Linear(64, 64)(torch.randn(2, 63))
    lin = nn.Linear(64, 8)
    with torch.no_grad():
        lin.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        NF4Linear.from_linear(lin)
    model = nn.Sequential(nn.Linear(64, 8), nn.Linear(8, 3))
    with pytest.raises(ValueError, match="multiple of block_size"):
        apply_qlora(model, LoRAConfig(target_modules=["0", "1"]))
    assert isinstance(model[0], nn.Linear) and model[0].weight.requires_grad  # nothing changed
    model = nn.Sequential(nn.Linear(64, 8), nn.Linear(64, 64))
    with torch.no_grad():
        model[1].weight[3, 3] = float("inf")
    with pytest.raises(ValueError, match="not finite.*'1'"):
        apply_qlora(model, LoRAConfig(target_modules=["0", "1"]))
    assert isinstance(model[0], nn.Linear) and model[0].weight.requires_grad  # the first layer was not replaced


@pytest.mark.cuda
def test_runs_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q = qlora_linear(linear(128, 64).cuda(), r=4, generator=torch.Generator("cuda").manual_seed(0))
    x = torch.randn(3, 128, device="cuda", dtype=torch.bfloat16)
    q(x).float().sum().backward()
    assert q.base.codes.is_cuda and q.lora_A.grad.is_cuda

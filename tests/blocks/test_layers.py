"""Encoder/decoder layers equal torch.nn.TransformerEncoderLayer/DecoderLayer (batch_first=True) with copied
weights; LayerNorm equals nn.LayerNorm; FeedForward equals its closed form."""

import math

import pytest
import torch
import torch.nn as nn

from transformer_lib.blocks.layers import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    layer_norm,
    load_decoder_layer_from_torch,
    load_encoder_layer_from_torch,
)
from transformer_lib.blocks.masking import causal_mask, padding_mask

B, T, S, D, H, DFF = 2, 6, 5, 16, 4, 32
ATOL = 1e-5


def randomize_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every parameter (LayerNorm gains, zero-initialised biases too) random values, so a missed copy shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            for name, p in m.named_parameters(recurse=False):
                gain = isinstance(m, (nn.LayerNorm, LayerNorm)) and name == "weight"
                p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if gain else 0.0))
    return module


def randn(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- encoder and decoder layers
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    ref = nn.TransformerEncoderLayer(
        D, H, DFF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    ref = randomize_(ref).eval()
    ours = load_encoder_layer_from_torch(
        EncoderLayer(D, H, DFF, activation=activation, norm_first=norm_first), ref
    ).eval()
    x = randn(B, T, D)
    keep = padding_mask(torch.tensor([T, 4]), T)  # (B, T), True on real tokens
    cases = [
        (dict(), dict()),
        (dict(attention_mask=keep), dict(src_key_padding_mask=~keep)),
        (
            dict(attention_mask=keep, self_mask=causal_mask(T)),
            dict(src_key_padding_mask=~keep, src_mask=~causal_mask(T)),
        ),
    ]
    for ours_kwargs, ref_kwargs in cases:
        expected = ref(x, **ref_kwargs)
        for need_weights in (False, True):
            torch.testing.assert_close(
                ours(x, need_weights=need_weights, **ours_kwargs), expected, atol=ATOL, rtol=ATOL
            )


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_matches_torch(norm_first, activation):
    ref = nn.TransformerDecoderLayer(
        D, H, DFF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    ref = randomize_(ref).eval()
    ours = load_decoder_layer_from_torch(
        DecoderLayer(D, H, DFF, activation=activation, norm_first=norm_first), ref
    ).eval()
    x, memory = randn(B, T, D, seed=1), randn(B, S, D, seed=2)
    tgt_keep = padding_mask(torch.tensor([T, 4]), T)  # padded targets at the end: row 0 always sees key 0
    mem_keep = padding_mask(torch.tensor([3, S]), S)
    expected = ref(
        x, memory, tgt_mask=~causal_mask(T), tgt_key_padding_mask=~tgt_keep, memory_key_padding_mask=~mem_keep
    )
    for need_weights in (False, True):
        out = ours(
            x,
            memory,
            encoder_attention_mask=mem_keep,
            attention_mask=tgt_keep,
            is_causal=True,
            need_weights=need_weights,
        )
        torch.testing.assert_close(out, expected, atol=ATOL, rtol=ATOL)
    # without masks as well (is_causal=False must mean no mask at all)
    expected = ref(x, memory)
    torch.testing.assert_close(ours(x, memory, is_causal=False), expected, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("causal", [True, False])
def test_gpt_block_is_a_pre_norm_encoder_layer_masked_by_its_causal_flag(causal):
    # A decoder layer without cross-attention (a GPT block) is torch's pre-norm encoder layer, under a causal mask
    # when its ``causal`` attribute is True (the default) and unmasked when it is False.
    ref = randomize_(
        nn.TransformerEncoderLayer(D, H, DFF, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
    ).eval()
    block = DecoderLayer(D, H, DFF, activation="gelu", norm_first=True, cross_attention=False).eval()
    block.self_attn.load_from_torch(ref.self_attn)
    block.ffn.up.load_state_dict(ref.linear1.state_dict())
    block.ffn.down.load_state_dict(ref.linear2.state_dict())
    block.res_self.norm.load_state_dict(ref.norm1.state_dict())
    block.res_ffn.norm.load_state_dict(ref.norm2.state_dict())
    x = randn(B, T, D)
    expected = ref(x, src_mask=~causal_mask(T) if causal else None)
    assert block.causal
    block.causal = causal
    torch.testing.assert_close(block(x), expected, atol=ATOL, rtol=ATOL)
    # an explicit is_causal argument overrides the attribute for one call
    opposite = ref(x, src_mask=None if causal else ~causal_mask(T))
    torch.testing.assert_close(block(x, is_causal=not causal), opposite, atol=ATOL, rtol=ATOL)
    assert "forward" not in vars(block)  # the flag is read by the class's forward, which stays in place


def test_decoder_layer_rejects_a_non_bool_causal_flag():
    with pytest.raises(TypeError, match="causal must be a bool, got str 'yes'"):
        DecoderLayer(D, H, DFF, cross_attention=False, causal="yes")


@pytest.mark.parametrize("layer_cls", [EncoderLayer, DecoderLayer])
def test_layers_run_in_bf16_and_keep_the_dtype(layer_cls):
    layer = randomize_(layer_cls(D, H, DFF)).eval()
    x, memory = randn(B, T, D), randn(B, S, D, seed=2)
    args = (x,) if layer_cls is EncoderLayer else (x, memory)
    expected = layer(*args)
    out = layer.to(torch.bfloat16)(*(a.bfloat16() for a in args))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected, atol=0.1, rtol=0.05)


def test_decoder_layer_with_cross_attention_needs_memory():
    with pytest.raises(
        TypeError, match=r"memory must be a tensor \(B, Tk, d_model: a DecoderLayer with cross-attention"
    ):
        DecoderLayer(D, H, DFF)(randn(B, T, D))


def test_layer_with_bad_head_count_is_rejected():
    with pytest.raises(ValueError, match=r"d_model must be an int >= 1, a multiple of 3 \(n_heads\), got 16"):
        EncoderLayer(D, 3, DFF)


# ----------------------------------------------------------------------------- LayerNorm and FeedForward
@pytest.mark.parametrize("eps", [1e-5, 1e-12])
def test_layer_norm_matches_torch_fp32(eps):
    ref = randomize_(nn.LayerNorm(D, eps=eps))
    ours = LayerNorm(D, eps=eps)
    ours.load_state_dict(ref.state_dict())
    x = randn(B, T, D) * 3 + 1
    torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-5)
    # and the formula itself, in float64
    xd = x.double()
    closed = (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.var(-1, unbiased=False, keepdim=True) + eps)
    closed = closed * ref.weight.double() + ref.bias.double()
    torch.testing.assert_close(ours(x).double(), closed, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer_norm(x, ref.weight, ref.bias, eps).double(), closed, atol=1e-5, rtol=1e-5)


def test_layer_norm_rejects_the_wrong_width():
    with pytest.raises(
        ValueError, match=r"x must be a tensor of shape \(\.\.\., 16\) \(\.\.\., d_model\), got \(2, 6, 8\)"
    ):
        LayerNorm(D)(randn(B, T, 8))


def test_layer_norm_matches_torch_bf16():
    ref = randomize_(nn.LayerNorm(D)).to(torch.bfloat16)
    ours = LayerNorm(D).to(torch.bfloat16)
    ours.load_state_dict(ref.state_dict())
    x = (randn(B, T, D) * 3 + 1).bfloat16()
    out = ours(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref(x), atol=2e-2, rtol=1e-2)
    written_out = layer_norm(x, ours.weight, ours.bias)
    assert written_out.dtype == torch.bfloat16
    torch.testing.assert_close(written_out, ref(x), atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize(
    "activation,closed_form",
    [
        ("relu", lambda h: torch.clamp(h, min=0)),
        ("gelu", lambda h: 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))),
        ("gelu_tanh", lambda h: 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))),
    ],
)
def test_feed_forward_equals_its_closed_form(activation, closed_form):
    ffn = FeedForward(D, DFF, activation=activation)
    x = randn(B, T, D)
    w1, b1, w2, b2 = (p.double() for p in (ffn.up.weight, ffn.up.bias, ffn.down.weight, ffn.down.bias))
    expected = closed_form(x.double() @ w1.T + b1) @ w2.T + b2  # W_2 act(W_1 x + b_1) + b_2
    torch.testing.assert_close(ffn(x).double(), expected, atol=1e-5, rtol=1e-5)


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ValueError, match=r"activation must be one of .*got 'swish'"):
        FeedForward(D, DFF, activation="swish")


def test_encoder_layer_loads_state_dicts_saved_under_the_old_res_attn_name():
    """The encoder's self-attention residual is ``res_self`` (the decoder's name); checkpoints saved when it was
    ``res_attn`` (the book's date translator) still load strictly, to the same numbers."""
    ref = EncoderLayer(D, H, DFF, norm_first=True).eval()
    with torch.no_grad():
        ref.res_self.norm.weight.uniform_(0.5, 1.5)  # not the default ones: a dropped key would show
    old = {k.replace("res_self.", "res_attn."): v for k, v in ref.state_dict().items()}
    assert any(k.startswith("res_attn.") for k in old) and not any(k.startswith("res_self.") for k in old)
    fresh = EncoderLayer(D, H, DFF, norm_first=True).eval()
    fresh.load_state_dict(old, strict=True)
    x = randn(B, T, D)
    assert torch.equal(fresh(x), ref(x))
    nested = torch.nn.ModuleList([EncoderLayer(D, H, DFF, norm_first=True)]).eval()  # keys under a prefix too
    nested.load_state_dict({f"0.{k}": v for k, v in old.items()}, strict=True)
    assert torch.equal(nested[0](x), ref(x))

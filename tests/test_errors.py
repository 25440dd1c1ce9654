"""Bad input to the public API fails early and says what is wrong: each case checks the exception's type and that its
message names the argument and the value received (house rule 6: never a bare assert, a ZeroDivisionError or NaN)."""

import re

import pytest
import torch
import torch.nn as nn

from transformer_lib.blocks.attention import attention_weights, scaled_dot_product_attention, softmax_with_temperature
from transformer_lib.blocks.masking import causal_mask, padding_mask, padding_mask_from_ids, to_additive
from transformer_lib.models.configs import BertConfig, GPTConfig, TransformerConfig
from transformer_lib.models.transformer import GPT, BertEncoder, Transformer, init_weights
from transformer_lib.blocks.multihead import MultiHeadAttention
from transformer_lib.blocks.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    sinusoidal_table,
)
from transformer_lib.quant import QuantLinear, fake_quantize, int8_matmul, keep_outliers, quantize, quantize_model

GPT_OK = dict(vocab_size=11, block_size=8, n_layers=1, n_heads=2, d_model=8)
TF_OK = dict(
    src_vocab_size=13,
    tgt_vocab_size=11,
    d_model=8,
    n_heads=2,
    d_ff=16,
    n_encoder_layers=1,
    n_decoder_layers=1,
    max_len=16,
)
BERT_OK = dict(vocab_size=20, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=16)


def gpt_cfg(**kw):
    return GPTConfig(**{**GPT_OK, **kw})


def tf_cfg(**kw):
    return TransformerConfig(**{**TF_OK, **kw})


def bert_cfg(**kw):
    return BertConfig(**{**BERT_OK, **kw})


def qkv(b=2, h=2, tq=3, tk=4, d=8):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(b, h, tq, d, generator=g),
        torch.randn(b, h, tk, d, generator=g),
        torch.randn(b, h, tk, d, generator=g),
    )


def mha_call(mask):
    """Self-attention with B == H == 2, the case where a 3-D mask's leading dimension is ambiguous."""
    x = torch.randn(2, 3, 8)
    return lambda: MultiHeadAttention(8, 2)(x, attn_mask=mask)


def with_inf(shape=(4, 8), where=(1, 2), value=float("inf")):
    x = torch.randn(shape)
    x[where] = value
    return x


# (case id, call, exception type, argument named, value received as it must appear in the message)
CASES = [
    # ------------------------------------------------------------------ configs
    ("gpt-n_heads-zero", lambda: gpt_cfg(n_heads=0), ValueError, "n_heads", "0"),
    ("gpt-n_heads-float", lambda: gpt_cfg(n_heads=2.0), TypeError, "n_heads", "2.0"),
    ("gpt-vocab-negative", lambda: gpt_cfg(vocab_size=-3), ValueError, "vocab_size", "-3"),
    ("gpt-block-zero", lambda: gpt_cfg(block_size=0), ValueError, "block_size", "0"),
    ("gpt-layers-zero", lambda: gpt_cfg(n_layers=0), ValueError, "n_layers", "0"),
    ("gpt-d_ff-zero", lambda: gpt_cfg(d_ff=0), ValueError, "d_ff", "0"),
    ("gpt-indivisible", lambda: gpt_cfg(d_model=10, n_heads=4), ValueError, "d_model", "got 10"),
    ("gpt-dropout-one", lambda: gpt_cfg(dropout=1.0), ValueError, "dropout", "1.0"),
    ("gpt-dropout-nan", lambda: gpt_cfg(dropout=float("nan")), ValueError, "dropout", "nan"),
    ("gpt-positional", lambda: gpt_cfg(positional="absolute"), ValueError, "positional", "'absolute'"),
    ("gpt-kv-heads", lambda: gpt_cfg(n_kv_heads=3), ValueError, "n_kv_heads", "3"),
    ("gpt-kv-heads-zero", lambda: gpt_cfg(n_kv_heads=0), ValueError, "n_kv_heads", "0"),
    ("gpt-rope-odd-head", lambda: gpt_cfg(d_model=6, n_heads=2, positional="rope"), ValueError, "d_head", "3"),
    ("gpt-bias-str", lambda: gpt_cfg(bias="yes"), TypeError, "bias", "'yes'"),
    ("tf-heads-zero", lambda: tf_cfg(n_heads=0), ValueError, "n_heads", "0"),
    ("tf-layers-zero", lambda: tf_cfg(n_encoder_layers=0), ValueError, "n_encoder_layers", "0"),
    ("tf-max-len", lambda: tf_cfg(max_len=-1), ValueError, "max_len", "-1"),
    ("tf-dropout", lambda: tf_cfg(dropout=-0.1), ValueError, "dropout", "-0.1"),
    ("tf-activation", lambda: tf_cfg(activation="swish"), ValueError, "activation", "'swish'"),
    ("tf-odd-d_model", lambda: tf_cfg(d_model=9, n_heads=3), ValueError, "d_model", "9"),
    ("tf-pad-id", lambda: tf_cfg(pad_id=11), ValueError, "pad_id", "11"),
    ("tf-share-vocab", lambda: tf_cfg(share_embeddings=True), ValueError, "share_embeddings", "got 11"),
    ("tf-norm-first-str", lambda: tf_cfg(norm_first="pre"), TypeError, "norm_first", "'pre'"),
    ("bert-heads", lambda: bert_cfg(n_heads=3), ValueError, "n_heads", "3"),
    ("bert-eps", lambda: bert_cfg(eps=0.0), ValueError, "eps", "0.0"),
    ("bert-types", lambda: bert_cfg(type_vocab_size=0), ValueError, "type_vocab_size", "0"),
    # ------------------------------------------------------------------ models' inputs
    ("gpt-ids-float", lambda: GPT(gpt_cfg())(torch.zeros(1, 3)), ValueError, "idx", "torch.float32"),
    ("gpt-ids-list", lambda: GPT(gpt_cfg())([[1, 2]]), TypeError, "idx", "list"),
    ("gpt-ids-range", lambda: GPT(gpt_cfg())(torch.tensor([[1, 11]])), ValueError, "idx", "got 11"),
    (
        "gpt-targets-shape",
        lambda: GPT(gpt_cfg())(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 4).long()),
        ValueError,
        "targets",
        "(1, 4)",
    ),
    ("gpt-too-long", lambda: GPT(gpt_cfg())(torch.ones(1, 9, dtype=torch.long)), ValueError, "block_size", "9"),
    (
        "tf-src-mask-shape",
        lambda: Transformer(tf_cfg()).encode(torch.ones(2, 5).long(), torch.ones(2, 4).bool()),
        ValueError,
        "attention_mask",
        "(2, 4)",
    ),
    (
        "tf-src-mask-dtype",
        lambda: Transformer(tf_cfg()).encode(torch.ones(2, 5).long(), torch.ones(2, 5)),
        ValueError,
        "attention_mask",
        "torch.float32",
    ),
    (
        "tf-memory-shape",
        lambda: Transformer(tf_cfg()).decode(torch.ones(2, 3).long(), torch.zeros(2, 5, 6)),
        ValueError,
        "memory",
        "(2, 5, 6)",
    ),
    (
        "tf-tgt-mask-shape",
        lambda: Transformer(tf_cfg())(
            torch.ones(2, 5).long(), torch.ones(2, 3).long(), decoder_attention_mask=torch.ones(2, 4).bool()
        ),
        ValueError,
        "decoder_attention_mask",
        "(2, 4)",
    ),
    (
        "bert-token-types",
        lambda: BertEncoder(bert_cfg())(torch.ones(1, 4).long(), token_type_ids=torch.full((1, 4), 2)),
        ValueError,
        "token_type_ids",
        "got 2",
    ),
    (
        "bert-mask-list",
        lambda: BertEncoder(bert_cfg())(torch.ones(1, 4).long(), [[1, 1, 1, 1]]),
        TypeError,
        "attention_mask",
        "list",
    ),
    # ------------------------------------------------------------------ attention and masks
    ("mha-3d-mask-ambiguous", mha_call(torch.ones(2, 3, 3, dtype=torch.bool)), ValueError, "attn_mask", "(2, 3, 3)"),
    ("mha-1d-mask", mha_call(torch.ones(3, dtype=torch.bool)), ValueError, "attn_mask", "(3,)"),
    ("mha-mask-list", mha_call([[True]]), TypeError, "attn_mask", "list"),
    ("mha-mask-int", mha_call(torch.ones(3, 3, dtype=torch.long)), ValueError, "attn_mask", "torch.int64"),
    ("mha-mask-4d-wrong", mha_call(torch.ones(3, 2, 3, 3, dtype=torch.bool)), ValueError, "attn_mask", "(3, 2, 3, 3)"),
    (
        "mha-kpm-float",
        lambda: MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), attention_mask=torch.ones(2, 3)),
        ValueError,
        "attention_mask",
        "torch.float32",
    ),
    (
        "mha-query-int",
        lambda: MultiHeadAttention(8, 2)(torch.ones(2, 3, 8, dtype=torch.long)),
        ValueError,
        "query",
        "torch.int64",
    ),
    ("mha-query-shape", lambda: MultiHeadAttention(8, 2)(torch.randn(2, 3, 6)), ValueError, "query", "(2, 3, 6)"),
    ("mha-heads-zero", lambda: MultiHeadAttention(8, 0), ValueError, "n_heads", "0"),
    ("mha-heads-float", lambda: MultiHeadAttention(8, 2.5), TypeError, "n_heads", "2.5"),
    ("mha-dropout", lambda: MultiHeadAttention(8, 2, dropout=1.5), ValueError, "dropout", "1.5"),
    (
        "sdpa-temperature-inf",
        lambda: scaled_dot_product_attention(*qkv(), temperature=float("inf")),
        ValueError,
        "temperature",
        "inf",
    ),
    (
        "sdpa-temperature-str",
        lambda: scaled_dot_product_attention(*qkv(), temperature="1"),
        TypeError,
        "temperature",
        "'1'",
    ),
    ("sdpa-dropout", lambda: scaled_dot_product_attention(*qkv(), dropout_p=-0.5), ValueError, "dropout_p", "-0.5"),
    (
        "sdpa-int-q",
        lambda: scaled_dot_product_attention(torch.ones(2, 3, 4).long(), *qkv(b=1, h=2)[1:]),
        ValueError,
        "q",
        "torch.int64",
    ),
    (
        "weights-shapes",
        lambda: attention_weights(torch.randn(3, 8), torch.randn(4, 6)),
        ValueError,
        "k",
        "(..., Tk, 8), got (4, 6)",  # k's D must be q's
    ),
    ("softmax-temperature", lambda: softmax_with_temperature(torch.zeros(3), -2.0), ValueError, "temperature", "-2.0"),
    ("causal-float", lambda: causal_mask(3.0), TypeError, "t_q", "3.0"),
    ("causal-order", lambda: causal_mask(5, 3), ValueError, "t_k", "got 3"),
    ("padding-float-lengths", lambda: padding_mask(torch.tensor([2.0, 3.0])), ValueError, "lengths", "torch.float32"),
    ("padding-negative", lambda: padding_mask(torch.tensor([2, -1])), ValueError, "lengths", "-1"),
    ("padding-ids-1d", lambda: padding_mask_from_ids(torch.tensor([1, 0]), 0), ValueError, "ids", "(2,)"),
    (
        "to-additive-dtype",
        lambda: to_additive(torch.ones(2, dtype=torch.bool), torch.int32),
        ValueError,
        "dtype",
        "torch.int32",
    ),
    # ------------------------------------------------------------------ positions
    ("sinusoidal-len", lambda: sinusoidal_table(0, 8), ValueError, "max_len", "0"),
    ("sinusoidal-base", lambda: sinusoidal_table(4, 8, base=1.0), ValueError, "base", "1.0"),
    (
        "sinusoidal-offset",
        lambda: SinusoidalPositionalEncoding(8, 16)(torch.zeros(1, 2, 8), offset=-1),
        ValueError,
        "offset",
        "-1",
    ),
    (
        "learned-offset-float",
        lambda: LearnedPositionalEmbedding(8, 16)(torch.zeros(1, 2, 8), offset=1.5),
        TypeError,
        "offset",
        "1.5",
    ),
    ("rope-d_head", lambda: RotaryEmbedding(0), ValueError, "d_head", "0"),
    ("rope-offset", lambda: RotaryEmbedding(8)(torch.zeros(1, 1, 2, 8), offset=-2), ValueError, "offset", "-2"),
    ("alibi-heads", lambda: alibi_slopes(0), ValueError, "n_heads", "0"),
    ("alibi-lengths", lambda: alibi_bias(2, 5, 3), ValueError, "t_k", "3"),
    # ------------------------------------------------------------------ quantization
    ("quantize-inf", lambda: quantize(with_inf()), ValueError, "x", "inf"),
    ("quantize-nan", lambda: quantize(with_inf(value=float("nan")), symmetric=False), ValueError, "x", "nan"),
    ("fake-quantize-inf", lambda: fake_quantize(with_inf(value=-float("inf"))), ValueError, "x", "-inf"),
    ("quantize-int", lambda: quantize(torch.ones(4, 8, dtype=torch.long)), ValueError, "x", "torch.int64"),
    ("quantize-list", lambda: quantize([1.0, 2.0]), TypeError, "x", "list"),
    ("quantize-bits", lambda: quantize(torch.randn(4, 8), bits=3), ValueError, "bits", "3"),
    ("quantize-symmetric", lambda: quantize(torch.randn(4, 8), symmetric="yes"), TypeError, "symmetric", "'yes'"),
    (
        "quantize-scale-dtype",
        lambda: quantize(torch.randn(4, 8), scale_dtype=torch.int8),
        ValueError,
        "scale_dtype",
        "torch.int8",
    ),
    (
        "quantize-group",
        lambda: quantize(torch.randn(4, 8), granularity="group", group_size=3),
        ValueError,
        "group_size",
        "3",
    ),
    (
        "quantlinear-inf",
        lambda: QuantLinear.from_linear(
            nn.Linear(8, 4).requires_grad_(False).apply(lambda m: m.weight.__setitem__((0, 0), float("inf")))
        ),
        ValueError,
        "linear.weight",
        "inf",
    ),
    ("quantlinear-not-linear", lambda: QuantLinear.from_linear(nn.Conv1d(2, 2, 1)), TypeError, "linear", "Conv1d"),
    (
        "int8-matmul-dtype",
        lambda: int8_matmul(torch.ones(2, 4), torch.ones(3, 4, dtype=torch.int8)),
        ValueError,
        "xq",
        "torch.float32",
    ),
    ("quantlinear-size", lambda: QuantLinear(0, 4), ValueError, "in_features", "0"),
    ("dequantize-dtype", lambda: quantize(torch.randn(4, 8)).dequantize(torch.int8), ValueError, "dtype", "torch.int8"),
    (
        "quantize-model-skip",
        lambda: quantize_model(nn.Sequential(nn.Linear(8, 8)), skip="lm_head"),
        TypeError,
        "skip",
        "'lm_head'",
    ),
    ("init-std", lambda: init_weights(nn.Linear(2, 2), std=-1.0), ValueError, "std", "-1.0"),
    ("keep-outliers-n", lambda: keep_outliers(torch.randn(4, 8), 8), ValueError, "n_outliers", "8"),
]


@pytest.mark.parametrize("call,error,argument,received", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_clear_error(call, error, argument, received):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert type(info.value) is error  # not a subclass that happens to match (e.g. ZeroDivisionError is no ValueError)
    assert re.search(rf"(?<!\w){re.escape(argument)}(?!\w)", message), f"argument {argument!r} not named: {message}"
    assert received in message, f"received value {received!r} not in: {message}"


def test_mha_accepts_each_documented_mask_shape_and_reads_it_as_documented():
    """(Tq, Tk), (B, 1, Tq, Tk), (1, H, Tq, Tk) and (B, H, Tq, Tk) are accepted; each gives the same output as the
    explicit (B, H, Tq, Tk) mask it stands for, so a per-sequence mask is never applied per head."""
    torch.manual_seed(0)
    B = H = 2  # the ambiguous case: B == H
    Tq = Tk = 4
    mha = MultiHeadAttention(8, H).eval()
    x = torch.randn(B, Tq, 8)
    per_seq = torch.rand(B, Tq, Tk) > 0.3
    per_seq[..., 0] = True  # every row sees a key
    per_head = torch.rand(H, Tq, Tk) > 0.3
    per_head[..., 0] = True
    shared = per_seq[0]
    forms = {
        "(Tq, Tk)": (shared, shared.expand(B, H, Tq, Tk)),
        "(B, 1, Tq, Tk)": (per_seq[:, None], per_seq[:, None].expand(B, H, Tq, Tk)),
        "(1, H, Tq, Tk)": (per_head[None], per_head[None].expand(B, H, Tq, Tk)),
        "(B, H, Tq, Tk)": (per_seq[:, None] & per_head[None], per_seq[:, None] & per_head[None]),
    }
    for name, (mask, full) in forms.items():
        with torch.no_grad():
            got, w = mha(x, attn_mask=mask, need_weights=True)
            want, _ = mha(x, attn_mask=full.contiguous(), need_weights=True)
        torch.testing.assert_close(got, want, msg=name)
        assert not w[~full].any(), name  # masked positions get zero weight, per sequence and per head as written
    with pytest.raises(ValueError, match=r"ambiguous: write mask\[:, None\] .* or mask\[None\]"):
        mha(x, attn_mask=per_seq)


def test_gpt_n_heads_zero_is_a_value_error_not_a_division_by_zero():
    with pytest.raises(ValueError, match=r"GPTConfig\.n_heads must be an int >= 1, got 0"):
        GPTConfig(vocab_size=5, n_heads=0)


def test_quantize_of_finite_values_next_to_an_inf_would_have_read_back_nan():
    """Why ``quantize`` refuses an inf: the scale it sets is inf and every value of its row reads back as NaN."""
    x = with_inf()
    scale = x.abs().amax(dim=-1) / 127  # what absmax would use per row
    assert torch.isinf(scale[1]) and torch.isnan(torch.round(x[1] / scale[1]) * scale[1]).any()
    with pytest.raises(ValueError, match=r"1 non-finite value\(s\), the first inf at index \(1, 2\)"):
        quantize(x)

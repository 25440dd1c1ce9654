"""experiments.param_shares counts a layer's parameters by kind: checked against PyTorch's own
nn.TransformerEncoderLayer / nn.TransformerDecoderLayer and against the closed form."""

import pytest
import torch.nn as nn

from transformer_lib.experiments.param_shares import ffn_share, parameter_shares


def _total(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("d_model,n_heads,d_ff", [(32, 4, 64), (64, 8, 256), (48, 6, 96)])
def test_layer_totals_equal_pytorch_transformer_layers(d_model, n_heads, d_ff):
    counts = parameter_shares(d_model, n_heads, d_ff)
    assert sum(counts["encoder layer"].values()) == _total(nn.TransformerEncoderLayer(d_model, n_heads, d_ff))
    assert sum(counts["decoder layer"].values()) == _total(nn.TransformerDecoderLayer(d_model, n_heads, d_ff))


@pytest.mark.parametrize("d_model,d_ff", [(32, 64), (64, 256), (512, 2048)])
def test_counts_by_kind_follow_the_closed_form(d_model, d_ff):
    d = d_model
    enc, dec = parameter_shares(d, 4, d_ff).values()
    assert enc["self-attention"] == dec["cross-attention"] == 4 * d * d + 4 * d  # W_Q, W_K, W_V, W_O and biases
    assert enc["feed-forward"] == 2 * d * d_ff + d_ff + d
    assert enc["LayerNorm"] == 2 * 2 * d and dec["LayerNorm"] == 3 * 2 * d
    assert enc["cross-attention"] == 0


def test_ffn_share_with_d_ff_four_d_model_is_about_two_thirds_of_an_encoder_layer_and_half_a_decoder_layer():
    enc, dec = parameter_shares(512, 8, 2048).values()
    assert abs(ffn_share(enc) - 8 / 12) < 0.002 and abs(ffn_share(dec) - 8 / 16) < 0.002

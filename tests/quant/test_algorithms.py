"""GPTQ, AWQ and SmoothQuant against round-to-nearest on random layers whose inputs are built to matter
(correlated features, outlier channels), closed forms (identity Hessian, ``(x / s) (W s)^T = x W^T``, SmoothQuant's
balanced maxima), round trips through ``QuantLinear``, and the model-level helpers on a tiny GPT."""

import copy

import pytest
import torch
import torch.nn.functional as F

from transformer_lib import GPT, GPTConfig
from transformer_lib.quant.awq import awq_linear, awq_quantize_model, awq_scales
from transformer_lib.quant.channel_scale import ScaledInput, scale_columns
from transformer_lib.quant.gptq import gptq_linear, gptq_quantize, gptq_quantize_model, layer_hessian
from transformer_lib.quant.grids import int_range
from transformer_lib.quant.linear import QuantEmbedding, QuantLinear, quantize_model, rtn_weight
from transformer_lib.quant.smoothquant import smooth_linear, smoothing_factors, smoothquant_model


def correlated_inputs(n, K, gen):
    """Inputs whose features are mixtures of each other, as a transformer's hidden states are."""
    z = torch.randn(n, K, generator=gen)
    mix = torch.randn(K, K, generator=gen) / K**0.5
    return z @ mix + 0.3 * torch.randn(n, K, generator=gen)


def outlier_inputs(n, K, gen, channels=(0, 1, 2, 3), factor=20.0):
    x = torch.randn(n, K, generator=gen)
    x[:, list(channels)] *= factor
    return x


def layer(K=64, N=32, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(K, N)


def output_mse(x, w, w_hat):
    """The layer's output error on inputs ``x``: ``mean((x W^T - x W_hat^T)^2)``."""
    return (x @ (w - w_hat).T).pow(2).mean().item()


# ----------------------------------------------------------------------------- GPTQ
@pytest.mark.parametrize("bits, group_size", [(4, None), (4, 16), (8, None)])
def test_rtn_weight_is_what_quant_linear_stores(bits, group_size):
    lin = layer()
    expected = QuantLinear.from_linear(lin, bits, group_size).dequantized_weight()
    assert torch.equal(rtn_weight(lin.weight, bits, group_size), expected)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("bits, group_size", [(4, None), (4, 16), (8, None), (8, 32)])
def test_gptq_output_error_is_at_most_round_to_nearest(seed, bits, group_size):
    gen = torch.Generator().manual_seed(seed)
    x, lin = correlated_inputs(512, 64, gen), layer(seed=seed)
    w = lin.weight.detach()
    rtn = output_mse(x, w, rtn_weight(w, bits, group_size))
    gptq = output_mse(x, w, gptq_linear(lin, x, bits, group_size).dequantized_weight())
    assert gptq <= rtn
    assert gptq < 0.85 * rtn  # correlated inputs: the error feedback has something to compensate


@pytest.mark.parametrize("group_size", [None, 8])
def test_gptq_with_uncorrelated_inputs_is_round_to_nearest(group_size):
    # H = 2 I: U is diagonal, so no error is fed forward and every code is the nearest one
    w = layer(32, 16).weight.detach()
    qt = gptq_quantize(w, 2 * torch.eye(32), bits=4, group_size=group_size, damp=1e-6)
    torch.testing.assert_close(qt.dequantize(), rtn_weight(w, 4, group_size), rtol=0, atol=0)


@pytest.mark.parametrize("group_size", [None, 8, 32])
def test_gptq_lazy_block_updates_give_the_column_by_column_result(group_size):
    # block=K: one block, every column's error spread at once (the unblocked algorithm); block=4 (or one group):
    # errors spread inside the block, then onto the later columns in one product. Same maths, same codes.
    gen = torch.Generator().manual_seed(5)
    x, lin = correlated_inputs(256, 64, gen), layer(seed=5)
    h = layer_hessian(x)
    one_block = gptq_quantize(lin.weight, h, 4, group_size, block=64)
    blocked = gptq_quantize(lin.weight, h, 4, group_size, block=4)
    assert torch.equal(one_block.q, blocked.q)
    assert torch.equal(one_block.scale, blocked.scale)


def test_layer_hessian_is_twice_the_mean_outer_product():
    x = torch.randn(10, 5)
    expected = 2 * sum(torch.outer(r, r) for r in x.double()) / 10
    torch.testing.assert_close(layer_hessian(x), expected)


@pytest.mark.parametrize("bits, group_size", [(4, None), (4, 16), (8, 16)])
def test_gptq_round_trips_through_quant_linear(bits, group_size):
    gen = torch.Generator().manual_seed(3)
    x, lin = correlated_inputs(256, 64, gen), layer(seed=3)
    qt = gptq_quantize(lin.weight, layer_hessian(x), bits, group_size)
    qmin, qmax = int_range(bits)
    assert qt.q.min() >= qmin and qt.q.max() <= qmax
    ql = gptq_linear(lin, x, bits, group_size)
    assert torch.equal(ql.dequantized_weight(), qt.dequantize())  # the stored weight is what GPTQ chose
    torch.testing.assert_close(ql(x), F.linear(x, qt.dequantize(), lin.bias))


def test_gptq_bad_arguments_raise():
    w = torch.randn(8, 16)
    with pytest.raises(
        ValueError,
        match=r"hessian must be a tensor of shape \(16, 16\) \(K, K: layer_hessian of the inputs\), got \(8, 8\)",
    ):
        gptq_quantize(w, torch.eye(8))
    with pytest.raises(
        ValueError, match=r"damp must be a finite number > 0 \(a fraction of H's mean diagonal, e.g. 0.01\), got 0"
    ):
        gptq_quantize(w, torch.eye(16), damp=0)
    with pytest.raises(
        ValueError, match=r"weight.shape\[1\] must be an int, a multiple of 5 \(whole groups of group_size=5\), got 16"
    ):
        gptq_quantize(w, torch.eye(16), group_size=5)
    with pytest.raises(ValueError, match="bits must be one of"):
        gptq_quantize(w, torch.eye(16), bits=3)
    with pytest.raises(ValueError, match=r"block must be an int >= 1 \(columns per lazy update\), got 0"):
        gptq_quantize(w, torch.eye(16), block=0)
    with pytest.raises(
        ValueError,
        match=r"x must be a tensor of shape \(any, 64\) \(n calibration inputs, in_features\), got \(4, 63\)",
    ):
        gptq_linear(layer(), torch.randn(4, 63))
    with pytest.raises(ValueError, match="x must be a floating-point tensor"):
        layer_hessian(torch.ones(4, 3, dtype=torch.int64))


def test_gptq_refuses_a_non_finite_hessian_naming_it():
    # a NaN calibration input makes a NaN Hessian; GPTQ must say so, not fail in linalg.cholesky (house rule 6)
    w, x = torch.randn(8, 16), torch.randn(32, 16)
    x[3, 5] = float("nan")
    nan_hessian = 2 * x.T.double() @ x.double() / x.shape[0]
    for h in (nan_hessian, torch.eye(16).index_put((torch.tensor(2), torch.tensor(2)), torch.tensor(float("inf")))):
        with pytest.raises(ValueError, match=r"hessian must be finite \(no NaN or inf\)"):
            gptq_quantize(w, h)
    with pytest.raises(ValueError, match=r"x must be finite \(no NaN or inf\)"):
        layer_hessian(x)  # the calibration input itself, caught where it enters


def test_gptq_refuses_a_hessian_that_is_not_positive_semi_definite_naming_it():
    w = torch.randn(8, 16)
    with pytest.raises(ValueError, match=r"hessian must be symmetric positive semi-definite"):
        gptq_quantize(w, -torch.eye(16))


# ----------------------------------------------------------------------------- channel scaling (AWQ, SmoothQuant)
def test_scaling_columns_and_dividing_the_input_leaves_the_output_unchanged():
    lin = layer().double()
    s = torch.rand(64, dtype=torch.float64) * 10 + 0.1
    x = torch.randn(7, 64, dtype=torch.float64)
    # closed form: (x / s) (W diag(s))^T = x W^T
    torch.testing.assert_close(ScaledInput(scale_columns(lin, s), s)(x), lin(x))
    torch.testing.assert_close(scale_columns(lin, s).weight, lin.weight * s)


def test_channel_scale_bad_arguments_raise():
    with pytest.raises(
        ValueError, match=r"s.min\(\) must be a finite number > 0 \(each scale divides an input channel\), got 0.0"
    ):
        scale_columns(layer(), torch.zeros(64))
    with pytest.raises(
        ValueError, match=r"s must be a tensor of shape \(64,\) \(one scale per input channel\), got \(32,\)"
    ):
        scale_columns(layer(), torch.ones(32))
    with pytest.raises(
        ValueError,
        match=r"x must be a tensor of shape \(\.\.\., 64\) \(\.\.\., K: one input per scale\), got \(2, 32\)",
    ):
        ScaledInput(layer(), torch.ones(64))(torch.randn(2, 32))


# ----------------------------------------------------------------------------- AWQ
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("group_size", [None, 16])
def test_awq_error_is_below_round_to_nearest_with_outlier_channels(seed, group_size):
    gen = torch.Generator().manual_seed(seed)
    x, held_out, lin = outlier_inputs(512, 64, gen), outlier_inputs(512, 64, gen), layer(seed=seed)
    awq, rtn = awq_linear(lin, x, 4, group_size), QuantLinear.from_linear(lin, 4, group_size)
    with torch.no_grad():
        for inputs in (x, held_out):  # the calibration set, and new inputs of the same kind
            ref = lin(inputs)
            assert (awq(inputs) - ref).pow(2).mean() < 0.9 * (rtn(inputs) - ref).pow(2).mean()


def test_awq_alpha_zero_is_round_to_nearest_and_the_best_alpha_is_chosen():
    gen = torch.Generator().manual_seed(4)
    x, lin = outlier_inputs(256, 64, gen), layer(seed=4)
    found = awq_scales(lin.weight, x, 4, 16, n_grid=10)
    w = lin.weight.detach()
    assert found.errors[0].item() == pytest.approx(output_mse(x, w, rtn_weight(w, 4, 16)), rel=1e-5)
    assert found.errors.min().item() == found.errors[int((found.alphas == found.alpha).nonzero())].item()
    assert found.alpha > 0  # outliers present: some scaling helps


def test_awq_round_trips_through_quant_linear():
    gen = torch.Generator().manual_seed(5)
    x, lin = outlier_inputs(256, 64, gen), layer(seed=5)
    m = awq_linear(lin, x, 4, 16)
    s = m.scale
    chosen = rtn_weight(lin.weight.detach() * s, 4, 16)  # what AWQ evaluated for this s
    assert isinstance(m.module, QuantLinear)
    assert torch.equal(m.module.dequantized_weight(), chosen)
    torch.testing.assert_close(m(x), F.linear(x / s, chosen, lin.bias))


def test_awq_bad_arguments_raise():
    with pytest.raises(
        ValueError, match=r"x must be a tensor of shape \(any, 64\) \(n calibration inputs, K\), got \(4, 32\)"
    ):
        awq_scales(layer().weight, torch.randn(4, 32))
    with pytest.raises(ValueError, match=r"n_grid must be an int >= 1 \(alphas 0, 1/n_grid, ..., 1\), got 0"):
        awq_scales(layer().weight, torch.randn(4, 64), n_grid=0)
    with pytest.raises(TypeError, match="linear must be an nn.Linear"):
        awq_linear(torch.nn.Conv1d(2, 2, 1), torch.randn(4, 64))


def test_awq_blames_an_infinite_weight_on_the_weight():
    w = layer().weight.detach().clone()
    w[1, 7] = float("inf")
    with pytest.raises(ValueError, match=r"weight must be finite \(no NaN or inf\)"):
        awq_scales(w, torch.randn(4, 64))
    with pytest.raises(ValueError, match=r"x must be finite \(no NaN or inf\)"):
        awq_scales(layer().weight, torch.full((4, 64), float("nan")))


# ----------------------------------------------------------------------------- SmoothQuant
def test_smoothing_factors_closed_form_and_balance():
    w = torch.tensor([[1.0, 4.0], [0.5, -2.0]])  # column maxima 1, 4
    s = smoothing_factors(torch.tensor([4.0, 1.0]), w, alpha=0.5)
    torch.testing.assert_close(s, torch.tensor([2.0, 0.5]))  # sqrt(4 / 1), sqrt(1 / 4)
    # alpha = 0.5 balances the two ranges: max|X_j / s_j| = max|W_j s_j| = sqrt(max|X_j| max|W_j|)
    torch.testing.assert_close(torch.tensor([4.0, 1.0]) / s, (w.abs() * s).amax(dim=0))
    torch.testing.assert_close(smoothing_factors(torch.tensor([4.0, 0.0]), w), torch.tensor([2.0, 1.0]))


def test_smoothing_leaves_the_float_output_unchanged():
    gen = torch.Generator().manual_seed(6)
    x, lin = outlier_inputs(128, 64, gen, channels=(3,), factor=50.0), layer(seed=6)
    with torch.no_grad():
        torch.testing.assert_close(smooth_linear(lin, x, quantize=False)(x), lin(x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_smoothing_reduces_w8a8_error_with_an_outlier_channel(seed):
    gen = torch.Generator().manual_seed(seed)
    x, lin = outlier_inputs(256, 64, gen, channels=(3,), factor=50.0), layer(seed=seed)
    smoothed, plain = smooth_linear(lin, x), QuantLinear.from_linear(lin, 8, act_bits=8)
    assert isinstance(smoothed.module, QuantLinear) and smoothed.module.act_bits == 8
    with torch.no_grad():
        ref = lin(x)
        assert (smoothed(x) - ref).pow(2).mean() < 0.5 * (plain(x) - ref).pow(2).mean()


def test_smoothquant_bad_arguments_raise():
    with pytest.raises(ValueError, match=r"alpha must be a number in \[0, 1\]"):
        smoothing_factors(torch.ones(64), layer().weight, alpha=1.5)
    with pytest.raises(
        ValueError,
        match=r"x_absmax must be a tensor of shape \(64,\) \(K: the largest \|x\| of each input channel\), got \(32,\)",
    ):
        smoothing_factors(torch.ones(32), layer().weight)


# ----------------------------------------------------------------------------- whole model
def tiny_gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=84, block_size=32, n_layers=2, d_model=64, n_heads=4)).eval()


def calibration(n=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(x[:, :-1], x[:, 1:]) for x in torch.randint(0, 84, (n, 4, 33), generator=gen)]


@torch.no_grad()
def loss_and_logits(model, batches):
    logits = torch.cat([model(x)[0] for x, _ in batches])
    targets = torch.cat([y for _, y in batches])
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item(), logits


def test_gptq_model_is_no_worse_than_round_to_nearest_on_the_calibration_data():
    model, batches = tiny_gpt(), calibration()
    _, ref = loss_and_logits(model, batches)
    rtn_loss, rtn = loss_and_logits(quantize_model(copy.deepcopy(model), 4, 16), batches)
    gptq_model = gptq_quantize_model(copy.deepcopy(model), batches, 4, 16)
    gptq_loss, gptq = loss_and_logits(gptq_model, batches)
    assert gptq_loss <= rtn_loss + 0.01
    assert (gptq - ref).pow(2).mean() <= (rtn - ref).pow(2).mean()
    assert isinstance(gptq_model.tok_emb, QuantEmbedding)  # the tie survives
    assert gptq_model.tok_emb.qweight.data_ptr() == gptq_model.lm_head.qweight.data_ptr()


def test_awq_model_is_no_worse_than_round_to_nearest_on_the_calibration_data():
    model, batches = tiny_gpt(), calibration()
    rtn_loss, _ = loss_and_logits(quantize_model(copy.deepcopy(model), 4, 16), batches)
    awq_model = awq_quantize_model(copy.deepcopy(model), batches, 4, 16, n_grid=5)
    awq_loss, _ = loss_and_logits(awq_model, batches)
    assert awq_loss <= rtn_loss + 0.01
    assert isinstance(awq_model.blocks[0].ffn.up, ScaledInput)
    assert isinstance(awq_model.lm_head, QuantLinear)  # tied: s = 1, read by the embedding too
    assert awq_model.tok_emb.qweight.data_ptr() == awq_model.lm_head.qweight.data_ptr()


def test_smoothquant_model_stays_close_to_float():
    model, batches = tiny_gpt(), calibration()
    _, ref = loss_and_logits(model, batches)
    _, out = loss_and_logits(smoothquant_model(copy.deepcopy(model), batches), batches)
    assert (out - ref).norm() / ref.norm() < 0.03  # the W8A8 bound quantize_model's tests use


def test_model_helpers_refuse_bad_input():
    with pytest.raises(
        ValueError, match=r"batches must hold at least 1 item\(s\) \(input tensors or \(x, y\) pairs\), got 0"
    ):
        gptq_quantize_model(tiny_gpt(), [])
    with pytest.raises(
        ValueError,
        match=r"in_features must be an int, a multiple of 48 \(group_size=48 must divide every layer's in_features\)",
    ):
        awq_quantize_model(tiny_gpt(), calibration(1), group_size=48)
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        smoothquant_model("gpt", calibration(1))

"""rnn.py against independent references: nn.RNN / nn.LSTM / nn.RNNCell, autograd, and closed forms."""

import pytest
import torch
import torch.nn as nn

from transformer_lib import MultiHeadAttention
from transformer_lib.experiments.recall import RecallLSTM, recall_accuracy, recall_batch, recall_gpt, train_recall
from transformer_lib.experiments.sequence_cost import count_flops, count_op_calls
from transformer_lib.models.rnn import (
    LSTM,
    ElmanRNN,
    input_gradient_norms,
    lstm_step,
    rnn_step,
    set_spectral_radius,
    spectral_radius,
    state_jacobian,
)


# ----------------------------------------------------------------------------- cells equal PyTorch's
@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_elman_rnn_matches_nn_rnn_with_copied_weights(nonlinearity):
    torch.manual_seed(0)
    ref = nn.RNN(5, 7, nonlinearity=nonlinearity, batch_first=True)
    ours = ElmanRNN(5, 7, nonlinearity).load_from_torch(ref)
    x, h0 = torch.randn(3, 11, 5), torch.randn(3, 7)
    out, h = ours(x, h0)
    ref_out, ref_h = ref(x, h0[None])
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(h, ref_h[0])


def test_rnn_step_matches_nn_rnn_cell():
    torch.manual_seed(1)
    cell = nn.RNNCell(4, 6)
    x, h = torch.randn(2, 4), torch.randn(2, 6)
    got = rnn_step(x, h, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    torch.testing.assert_close(got, cell(x, h))


def test_lstm_matches_nn_lstm_with_copied_weights():
    torch.manual_seed(2)
    ref = nn.LSTM(5, 7, batch_first=True)
    ours = LSTM(5, 7).load_from_torch(ref)
    x, h0, c0 = torch.randn(3, 13, 5), torch.randn(3, 7), torch.randn(3, 7)
    out, (h, c) = ours(x, (h0, c0))
    ref_out, (ref_h, ref_c) = ref(x, (h0[None], c0[None]))
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(h, ref_h[0])
    torch.testing.assert_close(c, ref_c[0])


def test_lstm_step_matches_nn_lstm_cell():
    torch.manual_seed(3)
    cell = nn.LSTMCell(4, 6)
    x, h, c = torch.randn(2, 4), torch.randn(2, 6), torch.randn(2, 6)
    got_h, got_c = lstm_step(x, h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    ref_h, ref_c = cell(x, (h, c))
    torch.testing.assert_close(got_h, ref_h)
    torch.testing.assert_close(got_c, ref_c)


def test_rnn_without_bias_matches_nn_rnn():
    torch.manual_seed(4)
    ref = nn.RNN(3, 4, bias=False, batch_first=True)
    ours = ElmanRNN(3, 4, bias=False).load_from_torch(ref)
    x = torch.randn(2, 5, 3)
    torch.testing.assert_close(ours(x)[0], ref(x)[0])


def test_rnn_follows_input_dtype():
    rnn = ElmanRNN(3, 4).to(torch.bfloat16)
    out, h = rnn(torch.randn(2, 5, 3, dtype=torch.bfloat16))
    assert out.dtype == h.dtype == torch.bfloat16 and out.shape == (2, 5, 4)


# ----------------------------------------------------------------------------- gradients
def test_state_jacobian_matches_autograd():
    torch.manual_seed(5)
    rnn = ElmanRNN(3, 4).double()
    x = torch.randn(1, 6, 3, dtype=torch.float64)
    h0 = torch.randn(1, 4, dtype=torch.float64)
    hiddens = rnn(x, h0)[0][0]  # (T, H)
    want = torch.autograd.functional.jacobian(lambda h: rnn(x, h[None])[1][0], h0[0])  # d h_T / d h_0
    torch.testing.assert_close(state_jacobian(rnn.weight_hh.detach(), hiddens.detach()), want)


def test_state_jacobian_at_zero_states_is_matrix_power():
    w = torch.randn(5, 5, dtype=torch.float64)
    torch.testing.assert_close(
        state_jacobian(w, torch.zeros(4, 5, dtype=torch.float64)), torch.linalg.matrix_power(w, 4)
    )


def test_set_spectral_radius_hits_the_target():
    w = torch.randn(16, 16, dtype=torch.float64)
    for rho in (0.5, 1.0, 1.1):
        scaled = set_spectral_radius(w, rho)
        assert torch.linalg.eigvals(scaled).abs().max().item() == pytest.approx(rho, rel=1e-9)
    q = torch.linalg.qr(torch.randn(8, 8))[0]  # orthogonal: every eigenvalue on the unit circle
    assert spectral_radius(q).item() == pytest.approx(1.0, rel=1e-5)


def test_input_gradient_norms_match_linear_rnn_closed_form():
    # linear RNN, last output h_T = sum_t W_hh^(T-1-t) W_ih x_t, so d(u . h_T)/dx_t = W_ih^T (W_hh^T)^(T-1-t) u
    torch.manual_seed(6)
    rnn = ElmanRNN(3, 4, nonlinearity="linear").double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    u = torch.randn(2, 4, dtype=torch.float64)
    w_ih, w_hh = rnn.weight_ih.detach(), rnn.weight_hh.detach()
    T = x.shape[1]
    grads = torch.stack([u @ torch.linalg.matrix_power(w_hh, T - 1 - t) @ w_ih for t in range(T)], dim=1)  # (B,T,D)
    want = grads.norm(dim=-1).pow(2).mean(0).sqrt()
    torch.testing.assert_close(input_gradient_norms(rnn, x, u), want)


def test_input_gradient_norms_match_autograd_jacobian():
    torch.manual_seed(7)
    attn = MultiHeadAttention(4, 2).double()
    x = torch.randn(1, 5, 4, dtype=torch.float64)
    u = torch.randn(1, 4, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda z: attn(z)[0][0, -1] @ u[0], x)  # (1, T, D)
    torch.testing.assert_close(input_gradient_norms(attn, x, u), jac[0].norm(dim=-1))


def test_linear_rnn_gradient_decays_as_rho_to_the_distance():
    torch.manual_seed(8)
    rnn = ElmanRNN(8, 8, nonlinearity="linear").double()
    with torch.no_grad():
        nn.init.orthogonal_(rnn.weight_hh)
        rnn.weight_hh.copy_(set_spectral_radius(rnn.weight_hh, 0.8))
        rnn.weight_ih.copy_(torch.eye(8))  # so that d loss / d x_t = d loss / d h_t
    g = input_gradient_norms(rnn, torch.randn(3, 10, 8, dtype=torch.float64))
    distance = torch.arange(9, -1, -1, dtype=torch.float64)
    torch.testing.assert_close(g / g[-1], 0.8**distance)  # orthogonal * 0.8 shrinks every vector by 0.8


# ----------------------------------------------------------------------------- the recall task
def test_recall_batch_layout():
    gen = torch.Generator().manual_seed(0)
    x, y = recall_batch(50, gap=7, n_symbols=5, generator=gen)
    assert x.shape == (50, 9) and y.shape == (50,)
    assert torch.equal(y, x[:, 0])  # the target is the first token
    assert (x[:, -1] == 5).all()  # the last token is the query
    assert x[:, :-1].min() >= 0 and x[:, :-1].max() < 5
    assert x.dtype == y.dtype == torch.long


def test_recall_batch_is_seeded():
    a = recall_batch(4, 3, generator=torch.Generator().manual_seed(1))
    b = recall_batch(4, 3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_recall_models_output_shapes():
    x, _ = recall_batch(3, 4, n_symbols=6)
    assert RecallLSTM(7)(x).shape == (3, 6, 7)
    assert recall_gpt(4, n_symbols=6)(x)[0].shape == (3, 6, 7)


def test_attention_learns_recall_at_a_short_gap():
    torch.manual_seed(0)
    model = recall_gpt(3, n_symbols=4)
    losses = train_recall(model, 3, steps=120, n_symbols=4, progress=False)
    assert losses[-1] < losses[0]
    assert recall_accuracy(model, 3, n=200, n_symbols=4) > 0.9  # chance is 0.25
    assert not model.training  # train_recall leaves it in eval mode


def test_recall_accuracy_restores_the_training_mode():
    model = recall_gpt(3, n_symbols=4).train()
    recall_accuracy(model, 3, n=8, n_symbols=4)
    assert model.training


# ----------------------------------------------------------------------------- counting
def test_rnn_op_calls_grow_with_length_attention_does_not():
    rnn, attn = ElmanRNN(4, 4), MultiHeadAttention(4, 2)
    r8, r16, r24 = (count_op_calls(rnn, torch.randn(1, t, 4)) for t in (8, 16, 24))
    a8, a16 = (count_op_calls(attn, torch.randn(1, t, 4)) for t in (8, 16))
    assert r16 - r8 == r24 - r16 >= 8  # the same operators again for every extra step: linear in T
    assert a8 == a16  # one fixed set of operators whatever T is


def test_count_flops_matches_closed_form():
    B, T, D, H = 2, 6, 3, 5
    assert count_flops(ElmanRNN(D, H), torch.randn(B, T, D)) == 2 * B * T * H * (D + H)
    d = 8
    attn = MultiHeadAttention(d, 2)
    # projections (q, k, v, out) + scores QK^T + weights @ V
    want = 2 * B * T * d * 4 * d + 2 * 2 * B * T * T * d
    assert count_flops(lambda z: attn(z, need_weights=True), torch.randn(B, T, d)) == want


# ----------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: ElmanRNN(3, 4)(torch.randn(2, 5, 6)), ["x", "d_in=3", "(2, 5, 6)"]),
        (lambda: ElmanRNN(3, 4)(torch.randn(5, 3)), ["x", "(5, 3)"]),
        (lambda: LSTM(3, 4)(torch.randn(2, 5, 2)), ["x", "d_in=3"]),
        (lambda: ElmanRNN(3, 4, nonlinearity="sigmoid"), ["nonlinearity", "sigmoid"]),
        (lambda: ElmanRNN(0, 4), ["d_in", "got 0"]),
        (lambda: ElmanRNN(3, 4).load_from_torch(nn.RNN(3, 5)), ["hidden_size=5"]),
        (lambda: ElmanRNN(3, 4).load_from_torch(nn.RNN(3, 4, nonlinearity="relu")), ["nonlinearity"]),
        (lambda: LSTM(3, 4).load_from_torch(nn.LSTM(3, 4, num_layers=2)), ["num_layers=2"]),
        (lambda: recall_batch(4, gap=-1), ["gap", "-1"]),
        (lambda: recall_batch(0, gap=3), ["batch_size", "0"]),
        (lambda: recall_batch(4, gap=3, n_symbols=1), ["n_symbols", "1"]),
        (lambda: spectral_radius(torch.randn(3, 4)), ["square", "(3, 4)"]),
        (lambda: set_spectral_radius(torch.randn(3, 3), -1.0), ["rho", "-1"]),
        (lambda: set_spectral_radius(torch.zeros(3, 3), 1.0), ["spectral_radius(w)", "> 0", "nilpotent", "got 0.0"]),
        (lambda: state_jacobian(torch.randn(3, 3), torch.randn(2, 4)), ["hiddens", "H=3", "(2, 4)"]),
        (lambda: input_gradient_norms(ElmanRNN(3, 4), torch.randn(5, 3)), ["x", "(5, 3)"]),
        (lambda: input_gradient_norms(ElmanRNN(3, 4), torch.randn(2, 5, 3), torch.randn(2, 3)), ["u", "H=4"]),
        (
            lambda: rnn_step(
                torch.randn(1, 2), torch.randn(1, 2), torch.randn(2, 2), torch.randn(2, 2), nonlinearity="gelu"
            ),
            ["nonlinearity", "gelu"],
        ),
    ],
)
def test_bad_inputs_raise_clear_value_errors(call, words):
    with pytest.raises(ValueError) as err:
        call()
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_a_module_of_another_kind_is_a_type_error_naming_both():
    with pytest.raises(TypeError, match=r"module must be an nn.LSTM, got RNN"):
        LSTM(3, 4).load_from_torch(nn.RNN(3, 4))


# ----------------------------------------------------------------------------- GPU
@pytest.mark.cuda
def test_rnn_and_lstm_match_torch_on_cuda():
    torch.manual_seed(9)
    ref_rnn, ref_lstm = nn.RNN(5, 7, batch_first=True).cuda(), nn.LSTM(5, 7, batch_first=True).cuda()
    rnn, lstm = ElmanRNN(5, 7).cuda().load_from_torch(ref_rnn), LSTM(5, 7).cuda().load_from_torch(ref_lstm)
    x = torch.randn(3, 9, 5, device="cuda")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # cuDNN's RNNs default to TF32 on Ampere+
        torch.testing.assert_close(rnn(x)[0], ref_rnn(x)[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(lstm(x)[0], ref_lstm(x)[0], atol=1e-5, rtol=1e-4)
    torch.manual_seed(0)
    model = recall_gpt(4).cuda()
    train_recall(model, 4, steps=2, progress=False)
    on_cpu = recall_gpt(4)
    on_cpu.load_state_dict(model.state_dict())
    assert next(model.parameters()).is_cuda  # trained where it was
    assert recall_accuracy(model, 4, n=256) == pytest.approx(recall_accuracy(on_cpu, 4, n=256), abs=2 / 256)

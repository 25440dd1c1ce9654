"""Chapter 01 exercises: a correct reader solution (written here, independently of the library) passes each
check; the usual mistakes fail with a message that names them; a stub that raises does not crash."""
import torch

from transformer_lib.exercises.ch01 import check_rnn_step, check_set_spectral_radius, check_state_jacobian


def not_implemented(*args):
    raise NotImplementedError("fill me in")


# ----------------------------------------------------------------------------- exercise 1: one RNN step
def rnn_step_solution(x_t, h, w_ih, w_hh, b_ih, b_hh):
    cell = torch.nn.RNNCell(w_ih.shape[1], w_ih.shape[0]).to(x_t.dtype)  # PyTorch's own cell as the reader's answer
    with torch.no_grad():
        for name, value in dict(weight_ih=w_ih, weight_hh=w_hh, bias_ih=b_ih, bias_hh=b_hh).items():
            getattr(cell, name).copy_(value)
        return cell(x_t, h)


def test_rnn_step_check_accepts_a_correct_solution():
    result = check_rnn_step(rnn_step_solution)
    assert result, result.message
    assert repr(result).startswith("Correct.")


def test_rnn_step_check_names_a_missing_tanh():
    result = check_rnn_step(lambda x, h, wi, wh, bi, bh: x @ wi.T + bi + h @ wh.T + bh)
    assert not result
    assert "tanh" in result.message and "largest difference" in result.message


def test_rnn_step_check_names_a_missing_bias():
    result = check_rnn_step(lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi.T + h @ wh.T + bh))
    assert not result and "both biases" in result.message


def test_rnn_step_check_reports_a_transposed_weight():
    result = check_rnn_step(lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi + bi + h @ wh.T + bh))
    assert not result and "raised" in result.message  # (B, D) @ (H, D) does not fit


def test_rnn_step_check_survives_a_stub():
    result = check_rnn_step(not_implemented)
    assert not result and "NotImplementedError" in result.message


# ----------------------------------------------------------------------------- exercise 2: spectral radius
def set_radius_solution(w, rho):
    return w * (rho / torch.linalg.eigvals(w).abs().max())


def test_spectral_radius_check_accepts_a_correct_solution():
    result = check_set_spectral_radius(set_radius_solution)
    assert result, result.message


def test_spectral_radius_check_names_the_spectral_norm_mix_up():
    result = check_set_spectral_radius(lambda w, rho: w * rho / torch.linalg.matrix_norm(w, 2))
    assert not result and "singular value" in result.message


def test_spectral_radius_check_rejects_an_unchanged_matrix():
    result = check_set_spectral_radius(lambda w, rho: w)
    assert not result and "largest difference" in result.message


# ----------------------------------------------------------------------------- exercise 3: Jacobian over k steps
def state_jacobian_solution(w_hh, hiddens):
    # the reader's way here: autograd through the steps h_t = tanh(W_hh h_{t-1} + c_t), choosing c_t so that the
    # visited states are exactly ``hiddens`` (c_t = atanh(h_t) - W_hh h_{t-1}, with h_0 = 0)
    k, H = hiddens.shape
    prev = torch.cat([torch.zeros(1, H, dtype=w_hh.dtype), hiddens[:-1]])
    c = torch.atanh(hiddens) - prev @ w_hh.T

    def run(h0):
        h = h0
        for t in range(k):
            h = torch.tanh(h @ w_hh.T + c[t])
        return h

    return torch.autograd.functional.jacobian(run, torch.zeros(H, dtype=w_hh.dtype))


def test_state_jacobian_check_accepts_an_autograd_solution():
    result = check_state_jacobian(state_jacobian_solution)
    assert result, result.message


def test_state_jacobian_check_names_the_missing_slope():
    result = check_state_jacobian(lambda w, hs: torch.linalg.matrix_power(w, hs.shape[0]))
    assert not result and "slope" in result.message


def test_state_jacobian_check_names_the_wrong_order():
    def wrong(w, hs):
        jac = torch.eye(w.shape[0], dtype=w.dtype)
        for h in hs:
            jac = jac @ (torch.diag(1 - h ** 2) @ w)
        return jac
    result = check_state_jacobian(wrong)
    assert not result and "newest step" in result.message


def test_gradient_prediction_passes_rho_to_the_d_and_explains_a_linear_guess():
    from transformer_lib.exercises.ch01 import explain_gradient_prediction
    measured = 0.9 ** 20  # what a rotation scaled to 0.9 gives exactly (the notebook measures it)
    assert explain_gradient_prediction(0.12, measured, rho=0.9, distance=20)
    assert "0.122" in explain_gradient_prediction(0.12, measured, rho=0.9, distance=20).message
    linear = explain_gradient_prediction(1 - 40 * 0.02, 0.98 ** 40, rho=0.98, distance=40)  # 0.2 against 0.446
    assert not linear and "exponentially" in linear.message
    assert not explain_gradient_prediction(0.5, measured, rho=0.9, distance=20)
    assert not explain_gradient_prediction(-1.0, measured, rho=0.9, distance=20)

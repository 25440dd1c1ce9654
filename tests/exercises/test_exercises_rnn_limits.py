"""Chapter 01 exercises: a correct reader solution (written here, independently of the library) passes each
check; the usual mistakes fail with a message that names them; a stub that raises does not crash."""

import pytest
import torch

from transformer_lib.exercises.rnn_limits import check_rnn_step, check_set_spectral_radius, check_state_jacobian


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
            jac = jac @ (torch.diag(1 - h**2) @ w)
        return jac

    result = check_state_jacobian(wrong)
    assert not result and "newest step" in result.message


def _closed_form_relative(eigenvalues, T=50):
    """Gradient size by distance for a diagonal (normal) recurrent matrix and a gradient with equal parts along each
    eigenvector: |sum_i lambda_i^d e_i| / |sum_i e_i| = sqrt(sum_i lambda_i^(2d) / n), exactly."""
    lam = torch.tensor(eigenvalues, dtype=torch.float64)
    d = torch.arange(T, dtype=torch.float64)[:, None]
    return ((lam[None, :] ** (2 * d)).mean(1)).sqrt()


def test_random_matrix_prediction_reads_the_verdict_and_the_rate_from_the_measurement():
    from transformer_lib.exercises.rnn_limits import explain_random_matrix_prediction

    eig = [0.9] + [0.5] * 15  # the spectral radius 0.9 is one eigenvalue among smaller ones
    relative = _closed_form_relative(eig)  # at d = 20 about 0.9^20 / 4: smaller than a rotation's
    w = torch.diag(torch.tensor(eig))
    right = explain_random_matrix_prediction("smaller", relative, w, distance=20)
    assert right and "smaller" in right.message and "0.900" in right.message  # the rate far back is rho
    wrong = explain_random_matrix_prediction("equal", relative, w, distance=20)
    assert not wrong and "you predicted 'equal'" in wrong.message and "94%" in wrong.message  # 15 of 16 inside
    rotation = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64))[0] * 0.9  # every |lambda| = 0.9
    assert explain_random_matrix_prediction("equal", _closed_form_relative([0.9] * 16), rotation, distance=20)
    assert not explain_random_matrix_prediction("larger", _closed_form_relative([0.9] * 16), rotation, distance=20)


def test_random_matrix_prediction_without_a_guess_reveals_nothing_and_a_bad_guess_is_named():
    from transformer_lib.exercises.rnn_limits import explain_random_matrix_prediction

    relative, w = _closed_form_relative([0.9, 0.5]), torch.diag(torch.tensor([0.9, 0.5]))
    empty = explain_random_matrix_prediction(None, relative, w, distance=20)
    assert not empty and "measured" not in empty.message
    with pytest.raises(ValueError, match=r"guess must be one of \['equal', 'larger', 'smaller'\], got 'bigger'"):
        explain_random_matrix_prediction("bigger", relative, w, distance=20)
    with pytest.raises(
        ValueError, match=r"distance must be an int in \[0, 8\] \(relative must reach one step further\), got 20"
    ):
        explain_random_matrix_prediction("smaller", relative[:10], w, distance=20)
    with pytest.raises(ValueError, match=r"relative must be a tensor of shape \(T,\)"):
        explain_random_matrix_prediction("smaller", relative[None], w, distance=20)

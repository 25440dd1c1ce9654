"""Chapter 01 exercises: one RNN step, rescaling a matrix to a spectral radius, the Jacobian across k steps, and
the explanation of exercise 4 (predict, then run: a gradient through a random matrix instead of a rotation).

Used in chapter 01.

Each ``check_*`` runs the reader's function and the library's (``transformer_lib.models.rnn``) on the same random
inputs (``checking.check_against``); when they differ, it also tries a few common mistakes and, if the reader's
function matches one, says which.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..utils.checks import check_choice, check_int, check_tensor
from ..models.rnn import rnn_step, set_spectral_radius, state_jacobian
from .checking import ExerciseResult, check_against, random_int


# ----------------------------------------------------------------------------- exercise 1
def check_rnn_step(fn: Callable) -> ExerciseResult:
    """``fn(x_t, h, w_ih, w_hh, b_ih, b_hh) -> h_new = tanh(x_t W_ih^T + b_ih + h W_hh^T + b_hh)``.

    ``x_t: (B, D)``, ``h: (B, H)``, ``w_ih: (H, D)``, ``w_hh: (H, H)``, ``b_ih, b_hh: (H,)``; returns ``(B, H)``.
    D and H always differ, so a transposed ``W_ih`` shows up as a shape error.
    """

    def make_inputs(gen):
        B, D = random_int(gen, 1, 4), random_int(gen, 2, 6)
        H = D + random_int(gen, 1, 3)  # never square: a transposed W_ih fails loudly
        r = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
        return r(B, D), r(B, H), r(H, D) * 0.5, r(H, H) * 0.5, r(H) * 0.1, r(H) * 0.1

    mistakes = [
        (
            "apply tanh to the sum (the new state is squashed into (-1, 1)).",
            lambda x, h, wi, wh, bi, bh: x @ wi.T + bi + h @ wh.T + bh,
        ),
        (
            "add both biases, b_ih and b_hh (your function adds neither).",
            lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi.T + h @ wh.T),
        ),
        (
            "add both biases, b_ih and b_hh (b_ih is missing).",
            lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi.T + h @ wh.T + bh),
        ),
        (
            "add both biases, b_ih and b_hh (b_hh is missing).",
            lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi.T + bi + h @ wh.T),
        ),
        (
            "the new state depends on the previous one: add h W_hh^T.",
            lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi.T + bi + bh),
        ),
    ]
    return check_against(fn, rnn_step, make_inputs, hints=dict(mistakes))


# ----------------------------------------------------------------------------- exercise 2
def check_set_spectral_radius(fn: Callable) -> ExerciseResult:
    """``fn(w, rho) -> w`` rescaled so that its largest eigenvalue magnitude is ``rho``.

    ``w: (H, H)`` float64 (random, so its eigenvalues are complex in general), ``rho`` a float.
    """

    def make_inputs(gen):
        H = random_int(gen, 2, 8)
        rho = float(torch.empty(1).uniform_(0.3, 1.5, generator=gen))
        return torch.randn(H, H, generator=gen, dtype=torch.float64), rho

    mistakes = [
        (
            "the spectral radius is the largest |eigenvalue| (torch.linalg.eigvals), not the largest singular value "
            "(that is the spectral norm, torch.linalg.matrix_norm(w, 2)).",
            lambda w, rho: w * rho / torch.linalg.matrix_norm(w, 2),
        ),
        (
            "use the largest *magnitude* |lambda| of the (complex) eigenvalues, not the largest real part.",
            lambda w, rho: w * rho / torch.linalg.eigvals(w).real.max(),
        ),
        (
            "divide by the current spectral radius, then multiply by rho.",
            lambda w, rho: w * torch.linalg.eigvals(w).abs().max() / rho,
        ),
    ]
    return check_against(fn, set_spectral_radius, make_inputs, hints=dict(mistakes))


# ----------------------------------------------------------------------------- exercise 3
def check_state_jacobian(fn: Callable) -> ExerciseResult:
    """``fn(w_hh, hiddens) -> d h_k / d h_0`` for a tanh RNN: ``diag(1 - h_k^2) W_hh ... diag(1 - h_1^2) W_hh``.

    ``w_hh: (H, H)`` float64, ``hiddens: (k, H)`` = ``h_1 ... h_k`` (values in (-1, 1)); returns ``(H, H)``.
    """

    def make_inputs(gen):
        H, k = random_int(gen, 2, 6), random_int(gen, 1, 6)
        w = torch.randn(H, H, generator=gen, dtype=torch.float64) / H**0.5
        return w, torch.tanh(torch.randn(k, H, generator=gen, dtype=torch.float64))

    def no_slope(w, hs):
        return torch.linalg.matrix_power(w, hs.shape[0])

    def wrong_order(w, hs):  # multiplies the newest step on the right
        jac = torch.eye(w.shape[0], dtype=w.dtype)
        for h in hs:
            jac = jac @ ((1 - h**2)[:, None] * w)
        return jac

    def slope_on_columns(w, hs):
        jac = torch.eye(w.shape[0], dtype=w.dtype)
        for h in hs:
            jac = (w * (1 - h**2)[None, :]) @ jac
        return jac

    mistakes = [
        ("each step also multiplies by tanh's slope, diag(1 - h_t^2); without it you get W_hh^k.", no_slope),
        ("the newest step goes on the left: J_k ... J_2 J_1 (matrix products do not commute).", wrong_order),
        ("diag(1 - h_t^2) W_hh scales the *rows* of W_hh (output units), not its columns.", slope_on_columns),
    ]
    return check_against(fn, state_jacobian, make_inputs, hints=dict(mistakes))


# ----------------------------------------------------------------------------- exercise 4 (predict, then run)
VERDICTS = ("larger", "equal", "smaller")
"""The answers exercise 4 accepts: the gradient compared with the rotation's ``rho ** d``."""


def explain_random_matrix_prediction(
    guess, relative: torch.Tensor, w_hh: torch.Tensor, distance: int
) -> ExerciseResult:
    """Exercise 4: the reader predicted whether a linear RNN whose recurrent matrix ``w_hh: (H, H)`` is a random
    matrix scaled to spectral radius ``rho`` (not a rotation) carries a gradient ``distance`` steps back that is
    ``"larger"``, ``"equal"`` (within a factor of 1.5) or ``"smaller"`` than a rotation's ``rho ** distance``.
    ``relative: (T,)`` is the measured gradient size at each distance from the end over its size at distance 0.
    The message explains the measurement from ``w_hh``'s eigenvalues and the measured factor per step far back.
    """
    if guess is None:
        return ExerciseResult(False, f"write your prediction first: my_guess = one of {VERDICTS}")
    check_choice("guess", guess, VERDICTS)
    check_tensor("relative", relative, ("T",), note="the gradient's size at distances 0 .. T-1, over d = 0's")
    check_int("distance", distance, min=0, max=relative.shape[0] - 2, note="relative must reach one step further")
    moduli = torch.linalg.eigvals(w_hh.detach().double().cpu()).abs()  # |lambda| of every eigenvalue
    rho = moduli.max().item()
    closed, measured = rho**distance, relative[distance].item()
    ratio = measured / closed
    verdict = "equal" if 1 / 1.5 <= ratio <= 1.5 else "larger" if ratio > 1.5 else "smaller"
    last = relative.numel() - 1
    rate = (relative[last].item() / measured) ** (1 / (last - distance))  # factor per step from d = distance on
    inner = (moduli < 0.8 * rho).float().mean().item()
    why = {
        "smaller": f"a rotation stretches every direction by exactly rho, so every part of the gradient shrinks "
        f"by rho per step. A random matrix's eigenvalues fill a disc of radius rho: only the largest "
        f"has |lambda| = rho (here {inner:.0%} of them have |lambda| < 0.8 rho), so most directions of "
        f"the gradient shrink faster than rho, and far back only the slowest is left",
        "larger": "a matrix that is not a rotation can stretch some vectors by more than rho for a while (its "
        "largest singular value is above its spectral radius) before the slowest eigenvalue sets the "
        "rate",
        "equal": "here the matrix's many eigenvalue directions happen to average out near the rotation's value",
    }
    summary = (
        f"measured {measured:.3g} at d = {distance}, {ratio:.2f} times the rotation's rho^d = {closed:.3g}: "
        f"{verdict}. Why: {why[verdict]}. From d = {distance} to d = {last} the measured factor per step was "
        f"{rate:.3f}, against rho = {rho:.3f}: the spectral radius sets the rate far back, not the size."
    )
    return ExerciseResult(guess == verdict, summary if guess == verdict else f"you predicted {guess!r}; {summary}")

"""Chapter 01 exercises: one RNN step, rescaling a matrix to a spectral radius, the Jacobian across k steps.

Used in chapter 01.

Each ``check_*`` runs the reader's function and the library's (``transformer_lib.rnn``) on the same random
inputs (``checking.check_against``); when they differ, it also tries a few common mistakes and, if the reader's
function matches one, says which.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..rnn import rnn_step, set_spectral_radius, state_jacobian
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
        ("apply tanh to the sum (the new state is squashed into (-1, 1)).",
         lambda x, h, wi, wh, bi, bh: x @ wi.T + bi + h @ wh.T + bh),
        ("add both biases, b_ih and b_hh (your function adds neither).",
         lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi.T + h @ wh.T)),
        ("add both biases, b_ih and b_hh (b_ih is missing).",
         lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi.T + h @ wh.T + bh)),
        ("add both biases, b_ih and b_hh (b_hh is missing).",
         lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi.T + bi + h @ wh.T)),
        ("the new state depends on the previous one: add h W_hh^T.",
         lambda x, h, wi, wh, bi, bh: torch.tanh(x @ wi.T + bi + bh)),
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
        ("the spectral radius is the largest |eigenvalue| (torch.linalg.eigvals), not the largest singular value "
         "(that is the spectral norm, torch.linalg.matrix_norm(w, 2)).",
         lambda w, rho: w * rho / torch.linalg.matrix_norm(w, 2)),
        ("use the largest *magnitude* |lambda| of the (complex) eigenvalues, not the largest real part.",
         lambda w, rho: w * rho / torch.linalg.eigvals(w).real.max()),
        ("divide by the current spectral radius, then multiply by rho.",
         lambda w, rho: w * torch.linalg.eigvals(w).abs().max() / rho),
    ]
    return check_against(fn, set_spectral_radius, make_inputs, hints=dict(mistakes))


# ----------------------------------------------------------------------------- exercise 3
def check_state_jacobian(fn: Callable) -> ExerciseResult:
    """``fn(w_hh, hiddens) -> d h_k / d h_0`` for a tanh RNN: ``diag(1 - h_k^2) W_hh ... diag(1 - h_1^2) W_hh``.

    ``w_hh: (H, H)`` float64, ``hiddens: (k, H)`` = ``h_1 ... h_k`` (values in (-1, 1)); returns ``(H, H)``.
    """
    def make_inputs(gen):
        H, k = random_int(gen, 2, 6), random_int(gen, 1, 6)
        w = torch.randn(H, H, generator=gen, dtype=torch.float64) / H ** 0.5
        return w, torch.tanh(torch.randn(k, H, generator=gen, dtype=torch.float64))

    def no_slope(w, hs):
        return torch.linalg.matrix_power(w, hs.shape[0])

    def wrong_order(w, hs):  # multiplies the newest step on the right
        jac = torch.eye(w.shape[0], dtype=w.dtype)
        for h in hs:
            jac = jac @ ((1 - h ** 2)[:, None] * w)
        return jac

    def slope_on_columns(w, hs):
        jac = torch.eye(w.shape[0], dtype=w.dtype)
        for h in hs:
            jac = (w * (1 - h ** 2)[None, :]) @ jac
        return jac

    mistakes = [
        ("each step also multiplies by tanh's slope, diag(1 - h_t^2); without it you get W_hh^k.", no_slope),
        ("the newest step goes on the left: J_k ... J_2 J_1 (matrix products do not commute).", wrong_order),
        ("diag(1 - h_t^2) W_hh scales the *rows* of W_hh (output units), not its columns.", slope_on_columns),
    ]
    return check_against(fn, state_jacobian, make_inputs, hints=dict(mistakes))


# ----------------------------------------------------------------------------- exercise 4 (predict, then run)
def explain_gradient_prediction(guess: float, measured: float, rho: float, distance: int) -> ExerciseResult:
    """The reader predicted the size of a linear RNN's gradient ``distance`` steps back, relative to the last
    step, for a recurrent matrix that is a rotation scaled to spectral radius ``rho``; ``measured`` is the
    notebook's value. A guess within a factor of 1.5 passes; otherwise the message explains ``rho ** distance``.
    """
    for name, value in (("guess", guess), ("measured", measured), ("rho", rho)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if guess <= 0:
        return ExerciseResult(False, f"a gradient's size is positive; you predicted {guess:g}. The measured value "
                                     f"is {measured:.3g}.")
    closed = rho ** distance
    why = (f"each step back multiplies the gradient by the transposed recurrent matrix, a rotation scaled by "
           f"rho = {rho}, which stretches every vector by exactly rho: after d = {distance} steps, "
           f"rho^d = {closed:.3g}.")
    if max(guess / measured, measured / guess) <= 1.5:
        return ExerciseResult(True, f"measured {measured:.3g}; {why}")
    slip = (f" You predicted about 1 - d (1 - rho) = {1 - distance * (1 - rho):.3g}, a linear decay: it is a "
            f"product of d factors, so it decays exponentially." if abs(guess - (1 - distance * (1 - rho))) < 0.05
            else f" You predicted rho * d = {rho * distance:.3g}: the factors multiply, they do not add."
            if abs(guess - rho * distance) < 0.05 else "")
    return ExerciseResult(False, f"measured {measured:.3g}, you predicted {guess:g}: {why}{slip}")

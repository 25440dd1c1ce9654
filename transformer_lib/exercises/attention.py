"""Chapter 02 exercises: softmax with temperature, scaled dot-product attention, entropy of a row.

Used in chapter 02.

Each ``check_*`` runs the reader's function and the library's on the same random inputs
(``checking.check_against``) and, when they differ, also tries a few common mistakes: if the reader's function
matches one of them, the message says which.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..blocks.attention import scaled_dot_product_attention, softmax_with_temperature
from ..utils.checks import check_number
from ..analysis.head_stats import entropy_bits
from .checking import ExerciseResult, check_against


def _cycle(values):
    """A closure cycling through ``values`` on each call (one per random case)."""
    state = {"i": -1}

    def next_value():
        state["i"] += 1
        return values[state["i"] % len(values)]

    return next_value


# ----------------------------------------------------------------------------- exercise 1
def check_softmax_with_temperature(fn: Callable) -> ExerciseResult:
    """``fn(scores, temperature) -> weights``: ``softmax(scores / temperature)`` over the last dimension.

    ``scores: (B, T)`` float32, ``temperature > 0``; the result has the shape of ``scores``, rows sum to 1.
    Two cases shift every score by +-1000 (the softmax does not change), where ``exp`` overflows or
    underflows unless each row's maximum is subtracted first.
    """

    def make_inputs_with(shift):
        def make_inputs(gen):
            B, T = (int(n) for n in torch.randint(1, 9, (2,), generator=gen))
            temperature = float(torch.empty(1).uniform_(0.1, 5.0, generator=gen))
            return torch.randn(B, T, generator=gen) * 3.0 + shift(), temperature

        return make_inputs

    make_inputs = make_inputs_with(_cycle([0.0, 0.0, 1000.0, 0.0, -1000.0]))
    small = make_inputs_with(_cycle([0.0]))  # no overflow here, so a formula mistake shows on its own
    return check_against(
        fn,
        softmax_with_temperature,
        make_inputs,
        hint_inputs=small,
        hints={
            "the result equals the plain softmax: divide the scores by the temperature first.": lambda s, t: (
                torch.softmax(s, -1)
            ),
            (
                "the result equals softmax(scores * temperature): divide by the temperature, do not multiply."
            ): lambda s, t: torch.softmax(s * t, -1),
            (
                "the softmax is taken over the wrong dimension: use the last one (dim=-1), one distribution per row."
            ): lambda s, t: torch.softmax(s / t, 0),
            "your formula is right on small scores but exp overflows on large ones: subtract each row's "
            "maximum before exp (softmax does not change when a row is shifted).": lambda s, t: torch.softmax(
                s / t, -1
            ),
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def _reference_attention(q, k, v):
    return scaled_dot_product_attention(q, k, v)


def check_scaled_dot_product_attention(fn: Callable) -> ExerciseResult:
    """``fn(q, k, v) -> out``: ``softmax(q k^T / sqrt(d_k)) v``.

    ``q: (B, Tq, d_k)``, ``k: (B, Tk, d_k)``, ``v: (B, Tk, d_v)`` float32 -> ``out: (B, Tq, d_v)``.
    """

    def make_inputs(gen):
        B, Tq, Tk, d_k, d_v = (int(n) for n in torch.randint(1, 9, (5,), generator=gen))
        return (
            torch.randn(B, Tq, d_k, generator=gen),
            torch.randn(B, Tk, d_k, generator=gen),
            torch.randn(B, Tk, d_v, generator=gen),
        )

    return check_against(
        fn,
        _reference_attention,
        make_inputs,
        hints={
            "your output equals softmax(q k^T) v: divide the scores by sqrt(d_k) before the softmax.": lambda q, k, v: (
                torch.softmax(q @ k.transpose(-2, -1), -1) @ v
            ),
            "your output equals softmax(q k^T / d_k) v: the scale is sqrt(d_k), not d_k.": lambda q, k, v: (
                torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], -1) @ v
            ),
            (
                "the softmax normalises over the queries (dim=-2): each query's row of weights must sum to 1 (dim=-1)."
            ): lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -2) @ v,
        },
    )


# ----------------------------------------------------------------------------- exercise 3
def check_attention_entropy(fn: Callable) -> ExerciseResult:
    """``fn(weights) -> entropy``: the entropy in **bits** of each row, ``-sum_j p_j log2 p_j``.

    ``weights: (Tq, Tk)`` float32, rows sum to 1, some entries exactly 0 (masked keys) -> ``(Tq,)``.
    A zero weight contributes 0 (the limit of ``p log p`` as ``p -> 0``).
    """

    def make_inputs(gen):
        Tq, Tk = (int(n) for n in torch.randint(2, 10, (2,), generator=gen))
        scores = torch.randn(Tq, Tk, generator=gen) * 2.0
        keep = torch.rand(Tq, Tk, generator=gen) > 0.3
        keep[:, 0] = True  # every row keeps at least one key
        return (torch.softmax(scores.masked_fill(~keep, float("-inf")), -1),)  # exact zeros where masked

    def dense(gen):  # no zeros: a wrong log base shows even if the zeros also give NaN
        Tq, Tk = (int(n) for n in torch.randint(2, 10, (2,), generator=gen))
        return (torch.softmax(torch.randn(Tq, Tk, generator=gen), -1),)

    # the last hint is for a function that is right on dense rows (so right but for the zeros)
    return check_against(
        fn,
        entropy_bits,
        make_inputs,
        hint_inputs=dense,
        hints={
            "your values are in nats (natural log): divide by log(2), or use torch.log2.": lambda w: (
                entropy_bits(w) * math.log(2.0)
            ),
            "your values have the wrong sign: entropy is MINUS the sum of p log p.": lambda w: -entropy_bits(w),
            "you summed over the wrong dimension: one entropy per query row (sum over the keys, dim=-1).": lambda w: (
                entropy_bits(w, dim=0)
            ),
            "0 * log(0) is NaN in floating point; a zero weight must contribute 0 (torch.special.xlogy(p, p) "
            "does this, or mask the zeros).": entropy_bits,
        },
    )


# ----------------------------------------------------------------------------- exercise 4 (predict, then run)
def explain_score_variance_prediction(
    guess_raw: float, guess_scaled: float, d_k: int, measured_raw: float, measured_scaled: float, rel_tol: float = 0.25
) -> ExerciseResult:
    """The reader predicted Var(q.k) (``guess_raw``) and Var(q.k / sqrt(d_k)) (``guess_scaled``) for ``q, k`` with
    ``d_k`` independent unit-variance entries; ``measured_*`` are the variances the notebook measured.

    A guess within ``rel_tol`` of the measurement passes; otherwise the message explains the closed form (d_k and 1)
    and names the usual slip (a standard deviation sqrt(d_k) instead of a variance, or the two swapped).
    """
    for name, value in (("guess_raw", guess_raw), ("guess_scaled", guess_scaled)):
        check_number(name, value, finite=False, note="your prediction")

    def close(guess, true):
        return abs(guess - true) <= rel_tol * abs(true)

    notes = []
    if not close(guess_raw, measured_raw):
        slip = (
            " You predicted about sqrt(d_k), the standard deviation: the variance is its square."
            if close(guess_raw, math.sqrt(d_k))
            else " That is the scaled variance: without the division the sum keeps all d_k units."
            if close(guess_raw, 1.0)
            else ""
        )
        notes.append(
            f"Var(q.k) measured {measured_raw:.1f}, you predicted {guess_raw:g}: q.k adds d_k = {d_k} "
            f"products q_i k_i, each of mean 0 and variance 1 and independent, so the variances add up to "
            f"d_k = {d_k}.{slip}"
        )
    if not close(guess_scaled, measured_scaled):
        notes.append(
            f"Var(q.k / sqrt(d_k)) measured {measured_scaled:.2f}, you predicted {guess_scaled:g}: "
            f"dividing by sqrt(d_k) divides the variance by d_k, so it is d_k / d_k = 1 for every d_k."
        )
    if notes:
        return ExerciseResult(False, " ".join(notes))
    return ExerciseResult(
        True,
        f"Var(q.k) = {measured_raw:.1f} (closed form d_k = {d_k}) and "
        f"Var(q.k / sqrt(d_k)) = {measured_scaled:.2f} (closed form 1).",
    )

"""Chapter 10 exercises: one query's attention by an online softmax, merging two partial results by their
log-sum-exp (split-K decoding), and a predict-then-run question on the memory of causal attention
(``explain_causal_peak``).

Used in chapter 10.

Each ``check_*`` runs the reader's function and the library's on the same random inputs
(``checking.check_against``) and, when they differ, tries a few common mistakes and names the one that matches.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..blocks.flash import materialised_attention, merge_partials
from ..book_tools.tensor_memory import peak_tensor_bytes
from .checking import ExerciseResult, check_against, random_int


# ----------------------------------------------------------------------------- exercise 1
def _row_inputs(gen):
    t_k, d_v = random_int(gen, 5, 40), random_int(gen, 1, 6)
    scores = torch.randn(t_k, generator=gen) * 40  # large scores: exp without the running max overflows float32
    return scores, torch.randn(t_k, d_v, generator=gen), random_int(gen, 1, 7)


def _reference_row(scores, values, block):
    return torch.softmax(scores, dim=-1) @ values


def _row_variant(rescale_sum=True, rescale_out=True, subtract_max=True):
    def wrong(scores, values, block):
        # m: the running maximum, row_sum: the running sum of exponentials (the paper's l), o: the running output
        m, row_sum, o = torch.tensor(-math.inf), torch.tensor(0.0), torch.zeros(values.shape[-1])
        for j in range(0, scores.shape[0], block):
            s = scores[j : j + block]
            m_new = torch.maximum(m, s.max()) if subtract_max else torch.tensor(0.0)
            p, alpha = torch.exp(s - m_new), torch.exp(m - m_new) if subtract_max else torch.tensor(1.0)
            row_sum = (alpha if rescale_sum else 1.0) * row_sum + p.sum()
            o = (alpha if rescale_out else 1.0) * o + p @ values[j : j + block]
            m = m_new
        return o / row_sum

    return wrong


def check_online_row(fn: Callable) -> ExerciseResult:
    """``fn(scores: (Tk,), values: (Tk, Dv), block: int) -> (Dv,)``: ``softmax(scores) @ values`` computed over
    blocks of ``block`` keys with a running maximum ``m``, sum ``l`` and output ``o``. (The check compares the
    result; that you used blocks is up to you.)"""
    return check_against(
        fn,
        _reference_row,
        _row_inputs,
        atol=1e-5,
        rtol=1e-4,
        hints={
            "when the maximum grows, the old sum l must shrink too: l = exp(m_old - m_new) * l + sum(p).": _row_variant(
                rescale_sum=False
            ),
            (
                "when the maximum grows, the old output o must be rescaled by exp(m_old - m_new) before adding p @ v."
            ): _row_variant(rescale_out=False),
            (
                "subtract the running maximum before exp: these scores reach about +-100, and exp(100) overflows "
                "float32."
            ): _row_variant(subtract_max=False),
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def _merge_inputs(gen):
    t_q, d_v = random_int(gen, 1, 3), random_int(gen, 1, 5)
    k1, k2 = random_int(gen, 1, 9), random_int(gen, 1, 9)
    q = torch.randn(t_q, 4, generator=gen) * 2
    parts = []
    for t_k in (k1, k2):
        k, v = torch.randn(t_k, 4, generator=gen), torch.randn(t_k, d_v, generator=gen)
        s = q @ k.T
        parts += [torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)]
    return tuple(parts)


def _reference_merge(o1, lse1, o2, lse2):
    return merge_partials([o1, o2], [lse1, lse2])


def check_merge(fn: Callable) -> ExerciseResult:
    """``fn(o1, lse1, o2, lse2) -> (Tq, Dv)``: attention over the keys of two parts, from each part's normalised
    output ``o: (Tq, Dv)`` and log-sum-exp of its scores ``lse: (Tq,)``."""
    return check_against(
        fn,
        _reference_merge,
        _merge_inputs,
        atol=1e-5,
        rtol=1e-4,
        hints={
            "a plain average weighs both parts alike; weigh each by its share of the softmax's denominator, "
            "exp(lse_i) / (exp(lse_1) + exp(lse_2)).": lambda o1, l1, o2, l2: (o1 + o2) / 2,
            (
                "the weights must sum to 1: divide exp(lse_i) by exp(lse_1) + exp(lse_2) (computed as exp(lse_i - "
                "lse))."
            ): lambda o1, l1, o2, l2: l1.exp()[:, None] * o1 + l2.exp()[:, None] * o2,
        },
    )


# ----------------------------------------------------------------------------- exercise 3: predict, then run
def causal_peak_bytes(T: int, d_head: int = 64) -> int:
    """Measured peak tensor bytes of ``materialised_attention(q, k, v, causal=True)`` on one head, fp32."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, T, d_head, generator=g) for _ in range(3))
    return peak_tensor_bytes(lambda: materialised_attention(q, k, v, causal=True))


def explain_causal_peak(guess, T: int, d_head: int, measured: int) -> ExerciseResult:
    """Compare the reader's predicted peak bytes (``guess``) of causal materialising attention with ``measured``;
    correct within 10%. The message counts the measurement in ``T x T`` float32 matrices."""
    if isinstance(guess, bool) or not isinstance(guess, (int, float)) or not guess > 0:
        return ExerciseResult(
            False, f"put your prediction (a positive number of bytes) in the variable first, got {guess!r}."
        )
    square = 4 * T * T
    story = (
        f"the measured peak is {measured:,} bytes, {measured / square:.2f} float32 matrices of T x T = "
        f"{square:,} bytes: at the peak the masked scores, their softmax and its NaN-free copy are alive together, "
        f"plus the boolean mask (1 byte per entry, a quarter of a float32 matrix) and the small output. "
        f"Masking half the matrix saves nothing here: masked entries are stored like the others."
    )
    if abs(guess - measured) <= 0.1 * measured:
        return ExerciseResult(True, f"you predicted {guess:,.0f}; {story}")
    return ExerciseResult(False, f"you predicted {guess:,.0f} ({guess / measured:.2f} times the measurement); {story}")

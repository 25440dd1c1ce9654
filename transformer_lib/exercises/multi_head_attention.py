"""Chapter 03 exercises: split into heads, a whole multi-head attention, a head's previous-token score.

Used in chapter 03.

Each ``check_*`` runs the reader's function and the library's on the same random inputs
(``checking.check_against``) and, when they differ, also tries a few common mistakes: if the reader's
function matches one of them, the message says which.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..analysis.head_stats import offset_weight
from ..blocks.multihead import MultiHeadAttention
from .checking import ExerciseResult, check_against, random_int


# ----------------------------------------------------------------------------- exercise 1
def _reference_split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    return MultiHeadAttention(x.shape[-1], n_heads).split_heads(x)


def _split_inputs(min_heads: int):
    def make_inputs(gen):
        B, T = random_int(gen, 1, 3), random_int(gen, 2, 6)
        H, D = random_int(gen, min_heads, 4), random_int(gen, 2, 5)
        return torch.randn(B, T, H * D, generator=gen), H

    return make_inputs


def check_split_heads(fn: Callable) -> ExerciseResult:
    """``fn(x, n_heads) -> heads``: ``x: (B, T, d_model)`` -> ``(B, n_heads, T, d_head)``,
    with ``d_head = d_model // n_heads``.

    Head ``h`` holds the features ``h * d_head .. (h + 1) * d_head - 1`` of every position,
    as ``MultiHeadAttention.split_heads``.
    """

    def shape(x, h):
        B, T, d = x.shape
        return B, T, h, d // h

    return check_against(
        fn,
        _reference_split_heads,
        _split_inputs(1),
        hint_inputs=_split_inputs(2),
        hints={
            "you reshaped straight to (B, H, T, d_head), which mixes positions across heads: view x as "
            "(B, T, H, d_head) first, then swap the T and H dimensions (.transpose(1, 2)).": lambda x, h: x.reshape(
                shape(x, h)[0], h, x.shape[1], x.shape[2] // h
            ),
            "your head h takes every H-th feature (a strided slice); each head owns a contiguous block of "
            "d_head features: view as (B, T, H, d_head), not (B, T, d_head, H).": lambda x, h: x.reshape(
                x.shape[0], x.shape[1], x.shape[2] // h, h
            ).permute(0, 3, 1, 2),
            "the values are right but the order is (B, T, H, d_head): move the head dimension before time "
            "with .transpose(1, 2).": lambda x, h: x.reshape(shape(x, h)),
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def _mha_inputs(min_heads: int):
    def make_inputs(gen):
        B, T = random_int(gen, 1, 3), random_int(gen, 2, 6)
        H, D = random_int(gen, min_heads, 4), random_int(gen, 2, 4)
        d = H * D
        scale = 1.0 / math.sqrt(d)
        return (
            torch.randn(B, T, d, generator=gen),
            torch.randn(3 * d, d, generator=gen) * 2 * scale,
            torch.randn(3 * d, generator=gen) * 0.1,
            torch.randn(d, d, generator=gen) * scale,
            torch.randn(d, generator=gen) * 0.1,
            H,
        )

    return make_inputs


def _module(w_qkv, b_qkv, w_o, b_o, n_heads) -> MultiHeadAttention:
    mha = MultiHeadAttention(w_o.shape[0], n_heads)
    with torch.no_grad():
        mha.qkv.weight.copy_(w_qkv), mha.qkv.bias.copy_(b_qkv), mha.out.weight.copy_(w_o), mha.out.bias.copy_(b_o)
    return mha


@torch.no_grad()
def _reference_mha(x, w_qkv, b_qkv, w_o, b_o, n_heads):
    return _module(w_qkv, b_qkv, w_o, b_o, n_heads)(x)[0]


@torch.no_grad()
def _mha_variant(x, w_qkv, b_qkv, w_o, b_o, n_heads, scale_dim=None, heads=None, project_out=True):
    """A deliberately altered multi-head attention, for hints."""
    d = x.shape[-1]
    heads = n_heads if heads is None else heads
    q, k, v = (t.unflatten(-1, (heads, d // heads)).transpose(1, 2) for t in (x @ w_qkv.T + b_qkv).split(d, -1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale_dim or d // heads)  # (B, H, T, T)
    y = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)  # (B, T, d)
    return y @ w_o.T + b_o if project_out else y


def check_multi_head_attention(fn: Callable) -> ExerciseResult:
    """``fn(x, w_qkv, b_qkv, w_o, b_o, n_heads) -> out``: multi-head self-attention, no mask.

    ``x: (B, T, d_model)``; ``w_qkv: (3 d_model, d_model)`` and ``b_qkv: (3 d_model,)`` are ``[W_Q; W_K; W_V]``
    stacked (the layout of ``MultiHeadAttention.qkv`` and ``nn.MultiheadAttention.in_proj_weight``,
    so ``q = x @ W_Q.T + b_Q``);
    ``w_o: (d_model, d_model)``, ``b_o: (d_model,)`` is the output projection. Returns ``(B, T, d_model)``.
    """
    return check_against(
        fn,
        _reference_mha,
        _mha_inputs(1),
        hint_inputs=_mha_inputs(2),
        hints={
            "your output is single-head attention over all d_model features: split q, k, v into n_heads "
            "heads of d_head = d_model // n_heads before the softmax.": lambda *a: _mha_variant(*a, heads=1),
            "the scores are divided by sqrt(d_model); each head's dot products have d_head terms, so divide "
            "by sqrt(d_head) = sqrt(d_model // n_heads).": lambda *a: _mha_variant(*a, scale_dim=a[0].shape[-1]),
            "the heads are concatenated but the output projection is missing: finish with "
            "out = concat @ w_o.T + b_o.": lambda *a: _mha_variant(*a, project_out=False),
        },
    )


# ----------------------------------------------------------------------------- exercise 3
def _maps_inputs(gen):
    H, T = random_int(gen, 1, 4), random_int(gen, 2, 8)
    return (torch.softmax(torch.randn(H, T, T, generator=gen) * 2.0, -1),)  # (H, T, T), rows sum to 1


def _reference_previous(attn):
    return offset_weight(attn, -1)


def check_previous_token_score(fn: Callable) -> ExerciseResult:
    """``fn(attn) -> score``: ``attn: (H, T, T)``, one map per head -> ``(H,)``.

    A head's score is the mean, over the queries ``i = 1 .. T-1`` that have a previous token, of the
    weight on key ``i - 1`` (``head_stats.offset_weight(attn, -1)``). A head that always looks one
    token back scores 1.
    """
    return check_against(
        fn,
        _reference_previous,
        _maps_inputs,
        hints={
            "you measured the weight on the NEXT token: query i's previous token is key i - 1, the diagonal "
            "just below the main one (attn[i, i-1]; torch.diagonal(attn, offset=-1, dim1=-2, dim2=-1)).": lambda a: (
                offset_weight(a, +1)
            ),
            "you measured the weight each query puts on itself (the main diagonal); the previous token is "
            "one column to the left.": lambda a: offset_weight(a, 0),
            "you divided by T; only T - 1 queries have a previous token (query 0 has none): take the mean "
            "over those T - 1 values.": lambda a: offset_weight(a, -1) * (a.shape[-1] - 1) / a.shape[-1],
        },
    )


# ----------------------------------------------------------------------------- exercise 4 (predict, then run)
WEIGHTS_AXES = (
    "B: one map per sequence of the batch",
    "H: one map per head, not averaged over heads",
    "Tq: one row per query, from the sequence that asks",
    "Tk: one column per key, from the sequence that is read, in cross-attention the other one",
)


def explain_weights_shape_prediction(
    guess, batch: int = 3, t_query: int = 7, t_key: int = 5, d_model: int = 64, n_heads: int = 8
) -> ExerciseResult:
    """Compare a predicted shape with the weights ``MultiHeadAttention(d_model, n_heads)`` really returns for
    cross-attention: queries ``(batch, t_query, d_model)``, keys and values ``(batch, t_key, d_model)``.

    Runs the module (``need_weights=True``) and explains every axis the guess got wrong.
    """
    x, memory = torch.randn(batch, t_query, d_model), torch.randn(batch, t_key, d_model)
    with torch.no_grad():
        _, weights = MultiHeadAttention(d_model, n_heads)(x, memory, memory, need_weights=True)
    real = tuple(weights.shape)  # (B, H, Tq, Tk)
    try:
        guess = tuple(int(g) for g in guess)
    except (TypeError, ValueError):
        return ExerciseResult(False, f"write your guess as a tuple of 4 integers, got {guess!r}.")
    if guess == real:
        return ExerciseResult(True, f"the weights have shape {real}: " + "; ".join(WEIGHTS_AXES) + ".")
    if len(guess) != len(real):
        extra = (
            " nn.MultiheadAttention averages the heads by default (average_attn_weights=True) and returns "
            "(B, Tq, Tk); this module keeps one map per head."
            if len(guess) == 3
            else ""
        )
        return ExerciseResult(
            False,
            f"the weights have {len(real)} axes, {real}, your guess has {len(guess)}."
            + extra
            + " Axes: "
            + "; ".join(WEIGHTS_AXES)
            + ".",
        )
    wrong = [f"axis {i} is {real[i]}, not {guess[i]} ({WEIGHTS_AXES[i]})" for i in range(4) if guess[i] != real[i]]
    if guess[2:] == (t_query, t_query):
        wrong.append(f"a query reads the keys of the memory ({t_key} of them), not its own sequence")
    return ExerciseResult(False, f"the real shape is {real}: " + "; ".join(wrong) + ".")

"""Chapter 05 exercises: layer normalization, the position-wise feed-forward network, a residual sub-layer.

Used in chapter 05.

Each ``check_*`` runs the reader's function and the library's module on the same random inputs
(``checking.check_against``) and, when they differ, tries a few common mistakes to say which one it looks like.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..blocks.layers import FeedForward, LayerNorm, Residual
from ..utils.params import count_parameters
from .checking import ExerciseResult, check_against, random_int


# ----------------------------------------------------------------------------- exercise 1
def _ln_inputs(gen):
    B, T, d = random_int(gen, 1, 3), random_int(gen, 2, 5), random_int(gen, 4, 12)
    x = torch.randn(B, T, d, generator=gen) * 3 + torch.randn(B, T, 1, generator=gen) * 2  # each row its own offset
    return x, 1 + 0.3 * torch.randn(d, generator=gen), 0.3 * torch.randn(d, generator=gen), 1e-5


@torch.no_grad()
def _reference_layer_norm(x, gamma, beta, eps):
    ln = LayerNorm(x.shape[-1], eps)
    ln.weight.copy_(gamma), ln.bias.copy_(beta)
    return ln(x)


def _ln_variant(x, gamma, beta, eps, dim=-1, unbiased=False, affine=True):
    mean = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
    y = (x - mean) / torch.sqrt(var + eps)
    return y * gamma + beta if affine else y


def check_layer_norm(fn: Callable) -> ExerciseResult:
    """``fn(x, gamma, beta, eps) -> y``: ``x: (B, T, d)``, ``gamma, beta: (d,)``; normalize each position over
    its ``d`` features (mean 0, variance 1 with the *biased* variance, ``eps`` inside the square root), then
    scale by ``gamma`` and shift by ``beta``. Same as ``transformer_lib.LayerNorm`` and ``F.layer_norm``."""
    return check_against(
        fn,
        _reference_layer_norm,
        _ln_inputs,
        atol=1e-4,
        hints={
            "you normalized over the time axis (each feature across positions, like a batch norm over time); "
            "LayerNorm normalizes each position over its own features: use dim=-1.": lambda *a: _ln_variant(*a, dim=1),
            "you used the unbiased variance (divide by d - 1); LayerNorm divides by d: x.var(-1, unbiased=False) or "
            "((x - mean) ** 2).mean(-1).": lambda *a: _ln_variant(*a, unbiased=True),
            "gamma and beta are not applied: finish with y * gamma + beta.": lambda *a: _ln_variant(*a, affine=False),
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def _ffn_inputs(gen):
    B, T, d, f = random_int(gen, 1, 3), random_int(gen, 2, 5), random_int(gen, 3, 8), random_int(gen, 8, 16)
    return (
        torch.randn(B, T, d, generator=gen),
        torch.randn(f, d, generator=gen) / d**0.5,
        torch.randn(f, generator=gen) * 0.5,
        torch.randn(d, f, generator=gen) / f**0.5,
        torch.randn(d, generator=gen) * 0.5,
    )


@torch.no_grad()
def _reference_ffn(x, w1, b1, w2, b2):
    ffn = FeedForward(w1.shape[1], w1.shape[0], "relu")
    ffn.up.weight.copy_(w1), ffn.up.bias.copy_(b1), ffn.down.weight.copy_(w2), ffn.down.bias.copy_(b2)
    return ffn(x)


def check_feed_forward(fn: Callable) -> ExerciseResult:
    """``fn(x, w1, b1, w2, b2) -> y``: the paper's position-wise FFN, ``max(0, x W1^T + b1) W2^T + b2``.

    ``x: (B, T, d_model)``, ``w1: (d_ff, d_model)``, ``b1: (d_ff,)``, ``w2: (d_model, d_ff)``, ``b2: (d_model,)``
    (the layout of ``nn.Linear.weight``). Returns ``(B, T, d_model)``."""
    return check_against(
        fn,
        _reference_ffn,
        _ffn_inputs,
        hints={
            "there is no non-linearity between the two layers, so the FFN collapses into one linear map: apply "
            "ReLU (torch.relu) to x @ w1.T + b1.": lambda x, w1, b1, w2, b2: (x @ w1.T + b1) @ w2.T + b2,
            (
                "the ReLU is applied after the second layer; it belongs between the two: relu(x @ w1.T + b1) @ "
                "w2.T + b2."
            ): lambda x, w1, b1, w2, b2: torch.relu((x @ w1.T + b1) @ w2.T + b2),
            "you used GELU; the 2017 paper's FFN (and this exercise) uses ReLU.": lambda x, w1, b1, w2, b2: (
                torch.nn.functional.gelu(x @ w1.T + b1) @ w2.T + b2
            ),
        },
    )


# ----------------------------------------------------------------------------- exercise 3
def _res_inputs(norm_first: bool):
    def make_inputs(gen):
        B, T, d = random_int(gen, 1, 3), random_int(gen, 2, 5), random_int(gen, 4, 10)
        return (
            torch.randn(B, T, d, generator=gen) * 2 + 1,
            torch.randn(d, d, generator=gen) / d**0.5,
            torch.randn(d, generator=gen) * 0.5,
            norm_first,
        )

    return make_inputs


@torch.no_grad()
def _reference_residual(x, w, b, norm_first):
    res = Residual(x.shape[-1], norm_first=norm_first)
    return res(x, lambda h: h @ w.T + b)


def _ln(x):
    return torch.nn.functional.layer_norm(x, x.shape[-1:])


def check_residual(fn: Callable) -> ExerciseResult:
    """``fn(x, w, b, norm_first) -> y``: one residual sub-layer around ``f(h) = h @ w.T + b``, with a LayerNorm
    (``gamma = 1``, ``beta = 0``, ``eps = 1e-5``: ``F.layer_norm(h, h.shape[-1:])``).

    ``norm_first=False`` (post-norm, the 2017 paper): ``LN(x + f(x))``;
    ``norm_first=True`` (pre-norm, GPT-2): ``x + f(LN(x))``. ``x: (B, T, d)``, ``w: (d, d)``, ``b: (d,)``."""
    for norm_first in (False, True):
        name = "pre-norm (norm_first=True)" if norm_first else "post-norm (norm_first=False)"
        hinted = check_against(
            fn,
            _reference_residual,
            _res_inputs(norm_first),
            atol=1e-4,
            hints={
                (
                    "pre-norm and post-norm are swapped: post-norm is LN(x + f(x)), pre-norm is x + f(LN(x))."
                ): lambda x, w, b, nf: x + (_ln(x) @ w.T + b) if not nf else _ln(x + x @ w.T + b),
                "the residual (skip) connection is missing: add x back.": lambda x, w, b, nf: (
                    (_ln(x) @ w.T + b) if nf else _ln(x @ w.T + b)
                ),
                (
                    "in pre-norm the skip connection carries the *un-normalized* x: x + f(LN(x)), not LN(x) + f(LN(x))."
                ): lambda x, w, b, nf: _ln(x) + (_ln(x) @ w.T + b) if nf else _ln(x + x @ w.T + b),
            },
        )
        if not hinted:
            return ExerciseResult(False, f"{name}: {hinted.message}")
    return ExerciseResult(
        True, "your function matches the library's Residual for post-norm and pre-norm on 5 random cases each."
    )


# ----------------------------------------------------------------------------- exercise 4: predict, then run
def explain_model_ffn_share_prediction(guess, model) -> ExerciseResult:
    """The reader predicted ``guess``: the fraction (0..1) of a whole ``GPT``'s parameters that its blocks' FFNs
    hold, embeddings included (a tied output head counted once). ``model``: the ``GPT`` (a ``meta`` one will do).
    Correct within 0.03; the message says where the rest of the parameters are."""
    if isinstance(guess, bool) or not isinstance(guess, (int, float)) or not 0 < guess < 1:
        return ExerciseResult(False, f"put a fraction between 0 and 1 in my_guess, got {guess!r}.")
    total = count_parameters(model)
    ffn = sum(count_parameters(block.ffn) for block in model.blocks)
    blocks = sum(count_parameters(block) for block in model.blocks)
    emb = model.tok_emb.weight.numel()
    share = ffn / total
    why = (
        f"the {len(model.blocks)} FFNs hold {ffn:,} of {total:,} parameters = {share:.1%}. Inside a block the FFN is "
        f"{ffn / blocks:.1%} (this chapter's count), but the token embedding ({tuple(model.tok_emb.weight.shape)}, "
        f"{emb:,} parameters, shared with the output head) is in no block: it alone is {emb / total:.1%} of the model."
    )
    if abs(guess - share) <= 0.03:
        return ExerciseResult(True, why)
    hint = (
        " Did you give the block's share? The embedding sits outside every block."
        if abs(guess - ffn / blocks) <= 0.03
        else ""
    )
    return ExerciseResult(False, f"you predicted {guess:.2f}, the count gives {share:.3f}: {why}{hint}")

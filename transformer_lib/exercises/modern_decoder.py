"""Chapter 11 exercises: RMSNorm, a SwiGLU feed-forward, top-k gating, and a predict-then-run question on the
FLOPs one token costs in a mixture-of-experts layer (``explain_moe_flops``).

Used in chapter 11.

Each ``check_*`` runs the reader's function and the library's (``norms.py``, ``moe.py``) on the same random inputs
(``checking.check_against``); when they differ it tries the usual mistakes and names the one the reader made.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ..blocks.moe import top_k_gating
from ..blocks.norms import rms_norm
from .checking import ExerciseResult, check_against, random_int


# ----------------------------------------------------------------------------- exercise 1
def check_rms_norm(fn: Callable) -> ExerciseResult:
    """``fn(x, weight, eps) -> y``: ``x / sqrt(mean(x^2) + eps) * weight`` over the last dim.

    ``x: (B, T, d)`` float32 (not centred), ``weight: (d,)``, ``eps`` a float -> ``(B, T, d)``.
    """

    def make_inputs(gen):
        d = random_int(gen, 4, 32)
        x = torch.randn(random_int(gen, 1, 3), random_int(gen, 1, 5), d, generator=gen) * 2 + 1.5
        return x, torch.rand(d, generator=gen) + 0.5, 1e-2  # a large eps, so misplacing it shows

    def centred(x, w, eps):
        return F.layer_norm(x, x.shape[-1:], eps=eps) * w

    return check_against(
        fn,
        rms_norm,
        make_inputs,
        atol=1e-5,
        rtol=1e-4,
        hints={
            "you subtracted the mean: that is LayerNorm. RMSNorm divides by the root mean square of x itself.": centred,
            "eps belongs inside the square root: sqrt(mean(x^2) + eps), not sqrt(mean(x^2)) + eps.": lambda x, w, eps: (
                x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w
            ),
            "you took the mean of the squares over the wrong dimension: normalize each position over its features "
            "(dim=-1, keepdim=True).": lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + eps) * w,
            "the gain is missing: multiply by weight.": lambda x, w, eps: (
                x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            ),
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def _swiglu(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def check_swiglu(fn: Callable) -> ExerciseResult:
    """``fn(x, w_gate, w_up, w_down) -> y``: ``(SiLU(x W_gate) * (x W_up)) W_down``, weights in ``nn.Linear``'s
    layout: ``w_gate, w_up: (d_ff, d)``, ``w_down: (d, d_ff)``; ``x: (N, d)`` -> ``(N, d)``.
    """

    def make_inputs(gen):
        d, d_ff = random_int(gen, 4, 16), random_int(gen, 4, 24)
        return (
            torch.randn(random_int(gen, 1, 6), d, generator=gen),
            torch.randn(d_ff, d, generator=gen) * 0.5,
            torch.randn(d_ff, d, generator=gen) * 0.5,
            torch.randn(d, d_ff, generator=gen) * 0.5,
        )

    return check_against(
        fn,
        _swiglu,
        make_inputs,
        hints={
            (
                "the SiLU went on the wrong branch: the gate (x W_gate) passes through SiLU, x W_up stays linear."
            ): lambda x, g, u, d: (F.silu(x @ u.T) * (x @ g.T)) @ d.T,
            (
                "you used a sigmoid gate (that is GLU, Dauphin et al. 2017): SwiGLU uses SiLU, x * sigmoid(x)."
            ): lambda x, g, u, d: (torch.sigmoid(x @ g.T) * (x @ u.T)) @ d.T,
            "you used GELU (that is GEGLU): SwiGLU uses SiLU.": lambda x, g, u, d: (F.gelu(x @ g.T) * (x @ u.T)) @ d.T,
            "the gate is missing: the product of the two branches is what makes it gated.": lambda x, g, u, d: (
                F.silu(x @ g.T) @ d.T
            ),
        },
    )


# ----------------------------------------------------------------------------- exercise 3
def _dense_gates(logits: torch.Tensor, k: int) -> torch.Tensor:
    weights, experts = top_k_gating(logits, k)
    return torch.zeros_like(logits).scatter(-1, experts, weights)


def check_top_k_gates(fn: Callable) -> ExerciseResult:
    """``fn(logits, k) -> gates``: Mixtral's gating as an ``(N, E)`` matrix: the softmax probabilities of each
    token's ``k`` best experts, renormalized to sum to 1, and 0 for every other expert. ``logits: (N, E)``.
    """

    def make_inputs(gen):
        E = random_int(gen, 3, 8)
        return torch.randn(random_int(gen, 1, 6), E, generator=gen) * 2, random_int(gen, 1, E - 1)

    def not_renormalized(logits, k):
        p = logits.softmax(-1)
        top = p.topk(k, -1)
        return torch.zeros_like(p).scatter(-1, top.indices, top.values)

    def smallest(logits, k):
        p = logits.softmax(-1)
        low = p.topk(k, -1, largest=False)
        return torch.zeros_like(p).scatter(-1, low.indices, low.values / low.values.sum(-1, keepdim=True))

    return check_against(
        fn,
        _dense_gates,
        make_inputs,
        hints={
            (
                "the k weights must sum to 1 (Mixtral renormalizes them; only Switch's top-1 keeps the raw "
                "probability)."
            ): not_renormalized,
            "every expert got a weight: keep only the k largest per token and set the others to 0.": lambda logits, k: (
                logits.softmax(-1)
            ),
            "you kept the k smallest: topk returns the largest unless told largest=False.": smallest,
        },
    )


# ----------------------------------------------------------------------------- predict, then run
def moe_flops_parts(d_model: int, d_ff: int, n_experts: int, top_k: int) -> dict[str, int]:
    """FLOPs of one token through a ``moe.MoE`` layer, by part (2 per multiply-add)."""
    return {"router": 2 * n_experts * d_model, "experts": top_k * 2 * 3 * d_model * d_ff}


def explain_moe_flops(guess, measured: int, d_model: int, d_ff: int, n_experts: int, top_k: int) -> ExerciseResult:
    """Compare the reader's predicted FLOPs of one token through ``MoE(d_model, d_ff, n_experts, top_k)``
    (``measured``: what ``torch.utils.flop_counter`` counted) with its parts, and name a guess that counts every
    expert, forgets the router, counts parameters instead of FLOPs or two matrices per expert instead of three."""
    if isinstance(guess, bool) or not isinstance(guess, (int, float)):
        return ExerciseResult(False, f"put your prediction (a number of FLOPs) in the variable first, got {guess!r}.")
    parts = moe_flops_parts(d_model, d_ff, n_experts, top_k)
    why = (
        f"the router multiplies the token by a ({d_model}, {n_experts}) matrix: {parts['router']:,} FLOPs; each "
        f"of the {top_k} chosen experts by three ({d_model}, {d_ff}) matrices: {parts['experts']:,} FLOPs in all; "
        f"{measured:,} FLOPs counted"
    )
    if guess == measured:
        return ExerciseResult(True, why + ".")
    expert = 2 * 3 * d_model * d_ff
    wrong = {
        "how many experts run: only the top_k chosen ones, not all of them": parts["router"] + n_experts * expert,
        "the router, a small matrix product of its own": parts["experts"],
        "the unit: a multiply-add is 2 FLOPs, so FLOPs are twice the weights used": measured // 2,
        "the expert's shape: a SwiGLU expert has three matrices (gate, up, down), not two": parts["router"]
        + top_k * 2 * 2 * d_model * d_ff,
    }
    for what, count in wrong.items():
        if guess == count:
            return ExerciseResult(False, f"you guessed {guess:,}: check {what}. In fact, {why}.")
    return ExerciseResult(False, f"you guessed {guess:,}, off by {guess - measured:+,}. In fact, {why}.")

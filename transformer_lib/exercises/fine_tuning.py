"""Chapter 12 exercises: a LoRA layer's forward pass, and a predict-then-run question on what Adam keeps for a LoRA
adapter against full fine-tuning (``explain_adam_bytes``).

Used in chapter 12.

``check_lora_forward`` runs the reader's function and the library's (``lora.LoRALinear``) on the same random inputs
(``checking.check_against``); when they differ it tries the usual mistakes and names the one the reader made.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from ..training.lora import LoRALinear
from .checking import ExerciseResult, check_against, random_int


def _library_lora(x, weight, bias, lora_a, lora_b, alpha):
    base = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        base.weight.copy_(weight)
        base.bias.copy_(bias)
    layer = LoRALinear(base, r=lora_a.shape[0], alpha=alpha)
    with torch.no_grad():
        layer.lora_A.copy_(lora_a)
        layer.lora_B.copy_(lora_b)
        return layer(x)


# ----------------------------------------------------------------------------- exercise 1
def check_lora_forward(fn: Callable) -> ExerciseResult:
    """``fn(x, weight, bias, lora_a, lora_b, alpha) -> y``: ``x W^T + b + (alpha / r) x A^T B^T``.

    ``x: (N, in)``, ``weight: (out, in)``, ``bias: (out,)``, ``lora_a: (r, in)``, ``lora_b: (out, r)`` (non-zero
    here, so the adapter shows), ``alpha`` a float -> ``(N, out)``.
    """

    def make_inputs(gen):
        n_in, n_out, r = random_int(gen, 4, 16), random_int(gen, 4, 16), random_int(gen, 2, 4)
        return (
            torch.randn(random_int(gen, 1, 5), n_in, generator=gen),
            torch.randn(n_out, n_in, generator=gen),
            torch.randn(n_out, generator=gen),
            torch.randn(r, n_in, generator=gen),
            torch.randn(n_out, r, generator=gen),
            float(random_int(gen, 2, 9)),
        )

    return check_against(
        fn,
        _library_lora,
        make_inputs,
        atol=1e-4,
        rtol=1e-4,
        hints={
            "the update is scaled by alpha / r, not by alpha: divide by the rank.": lambda x, w, b, a, bb, alpha: (
                x @ w.T + b + alpha * (x @ a.T @ bb.T)
            ),
            "the scaling alpha / r is missing.": lambda x, w, b, a, bb, alpha: x @ w.T + b + x @ a.T @ bb.T,
            (
                "the frozen layer's output is missing: LoRA adds its update to x W^T + b, it does not replace it."
            ): lambda x, w, b, a, bb, alpha: alpha / a.shape[0] * (x @ a.T @ bb.T),
            "the bias is missing: the frozen layer keeps its bias.": lambda x, w, b, a, bb, alpha: (
                x @ w.T + alpha / a.shape[0] * (x @ a.T @ bb.T)
            ),
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def adam_bytes_parts(n_in: int, n_out: int, r: int) -> dict[str, int]:
    """Bytes Adam keeps (two float32 moments per trained number, one float32 step per tensor) when fine-tuning one
    ``(n_out, n_in)`` linear layer with its bias (``"full"``) or a rank-``r`` LoRA adapter on it (``"lora"``)."""
    return {"full": 2 * 4 * (n_out * n_in + n_out) + 2 * 4, "lora": 2 * 4 * r * (n_in + n_out) + 2 * 4}


def explain_adam_bytes(guess, measured: int, n_in: int, n_out: int, r: int) -> ExerciseResult:
    """Compare the reader's predicted bytes of Adam's state for a rank-``r`` LoRA adapter on an ``(n_out, n_in)``
    linear (``measured``: ``lora.optimizer_state_bytes`` after one step) with its parts, and name a guess that counts
    one moment instead of two, the full layer's weights, ``r * n_in`` only, or forgets the two step counters."""
    if isinstance(guess, bool) or not isinstance(guess, (int, float)):
        return ExerciseResult(False, f"put your prediction (a number of bytes) in the variable first, got {guess!r}.")
    parts = adam_bytes_parts(n_in, n_out, r)
    why = (
        f"the adapter trains A ({r}, {n_in}) and B ({n_out}, {r}): {r * (n_in + n_out):,} numbers; Adam keeps two "
        f"float32 moments of each (8 bytes) and one float32 step counter per tensor (2 tensors): "
        f"{parts['lora']:,} bytes, against {parts['full']:,} for the full layer; {measured:,} bytes measured"
    )
    if guess == measured:
        return ExerciseResult(True, why + ".")
    wrong = {
        "how many moments Adam keeps: two (the mean and the mean square of the gradient), not one": 4
        * r
        * (n_in + n_out)
        + 8,
        "what trains: only the adapter's A and B, not the frozen layer": parts["full"],
        "the step counters: one float32 per trained tensor, 2 here": parts["lora"] - 8,
        "B's size too: A is (r, in) and B is (out, r)": 8 * r * n_in + 8,
    }
    for what, count in wrong.items():
        if guess == count:
            return ExerciseResult(False, f"you guessed {guess:,}: check {what}. In fact, {why}.")
    return ExerciseResult(False, f"you guessed {guess:,}, off by {guess - measured:+,}. In fact, {why}.")

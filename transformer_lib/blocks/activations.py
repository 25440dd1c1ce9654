"""The feed-forward's non-linearity: GELU (GPT-2, BERT) and the gated SwiGLU (PaLM, LLaMA, Mistral, Qwen2, Phi-3).

Used in chapter 11.

* GELU (Hendrycks & Gimpel 2016): ``x * Phi(x)``, Phi the standard normal CDF; exactly
  ``0.5 x (1 + erf(x / sqrt 2))``, or GPT-2's tanh approximation
  ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.
* SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"): the FFN's first matrix becomes two, one gated by
  the other through Swish/SiLU: ``FFN(x) = (SiLU(x W_gate) * (x W_up)) W_down``. Three matrices instead of two,
  so at equal parameters the hidden size shrinks to 2/3 of ``4 d_model`` (``swiglu_hidden``).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_int

GELU_APPROXIMATIONS = ("none", "tanh")


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU written out: ``"none"`` = ``x Phi(x)`` with the erf; ``"tanh"`` = GPT-2's approximation."""
    if approximate == "none":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if approximate == "tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    raise ValueError(f"approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")


def silu(x: torch.Tensor) -> torch.Tensor:
    """Swish with beta = 1 (Ramachandran et al. 2017), also called SiLU: ``x * sigmoid(x)``."""
    return x * torch.sigmoid(x)


def swiglu_hidden(d_model: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """LLaMA's hidden size for SwiGLU: ``2/3 * 4 d_model`` (same parameters as a 4x two-matrix FFN), times
    ``ffn_dim_multiplier`` if given, rounded up to a multiple of ``multiple_of`` (Meta's reference ``model.py``).

    LLaMA 7B: ``swiglu_hidden(4096) == 11008``.
    """
    for name, value in (("d_model", d_model), ("multiple_of", multiple_of)):
        check_int(name, value, min=1)
    hidden = int(2 * 4 * d_model / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


class SwiGLU(nn.Module):
    """Gated FFN without biases, ``(B, T, d_model) -> (B, T, d_model)``: ``down(silu(gate(x)) * up(x))``.

    ``gate``, ``up``: ``(d_ff, d_model)`` weights (nn.Linear layout); ``down``: ``(d_model, d_ff)``.
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        for name, value in (("d_model", d_model), ("d_ff", d_ff)):
            check_int(name, value, min=1)
        self.gate = nn.Linear(d_model, d_ff, bias=bias)  # W_gate
        self.up = nn.Linear(d_model, d_ff, bias=bias)  # W_up
        self.down = nn.Linear(d_ff, d_model, bias=bias)  # W_down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))  # F.silu is silu() above, fused

"""RMSNorm (Zhang & Sennrich 2019): LayerNorm without the mean, the normalization of LLaMA, Mistral, Qwen2, Phi-3.

Used in chapter 11.

    RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g        (no centering, no bias beta)

LayerNorm (``layers.LayerNorm``) subtracts the mean and divides by the standard deviation; RMSNorm only rescales
by the root mean square. Zhang & Sennrich argue the re-scaling is what stabilises training, and report quality on
par with LayerNorm at 7-64% less running time in their models (their numbers). Statistics in fp32 for any input.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..utils.checks import check_int, check_number, check_tensor


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm written out: ``x / sqrt(mean(x^2) + eps) * weight`` over the last dim of ``x: (..., d_model)``.

    ``weight`` (g): ``(d_model,)``. The mean square is taken in fp32; the normalized ``x`` is cast back to its
    dtype before the gain multiplies it (the order LLaMA's reference code and Hugging Face use).
    """
    check_tensor("x", x, floating=True)
    check_tensor("weight", weight, shape=(x.shape[-1],))
    check_number("eps", eps, min=0, min_open=True, note="a small positive number")
    xf = x.float()
    ms = (xf * xf).mean(dim=-1, keepdim=True)  # (..., 1): mean of squares, no centering
    return weight * (xf * torch.rsqrt(ms + eps)).to(x.dtype)


class RMSNorm(nn.Module):
    """``(..., d_model) -> (..., d_model)``: ``rms_norm`` with a trained gain ``weight`` (ones at start), no bias."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        check_int("d_model", d_model, min=1)
        check_number("eps", eps, 0, 1, min_open=True, max_open=True, note="a small positive number")
        self.weight = nn.Parameter(torch.ones(d_model))  # g
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the shape only (rms_norm checks the dtype): no NaN check on a model's every layer
        check_tensor("x", x, shape=(..., self.weight.shape[0]), note="..., d_model")
        return rms_norm(x, self.weight, self.eps)

"""SmoothQuant (Xiao et al. 2023): make activations easy to quantize for W8A8 by moving their outliers into the
weights. A few input channels of a transformer's linear layers carry values far larger than the rest; a per-token
int8 scale is set by them and the other channels lose their resolution. Dividing channel ``j`` by

Used in chapter 09.

    s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)        (``W_j``: column j of the weight, alpha = 0.5 by default)

and multiplying the weight's column ``j`` by ``s_j`` leaves the float output unchanged and balances the two
ranges: the activations' outlier channels shrink, the weights' columns grow (weights are quantized per output
channel, so a grown column costs little). The layer becomes ``ScaledInput(QuantLinear(act_bits=8), s)``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..utils.checks import check_number
from .calibration import replace_linears_calibrated
from .channel_scale import ScaledInput, scale_columns
from .grids import check_finite
from .linear import QuantLinear


def smoothing_factors(x_absmax: torch.Tensor, weight: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """``s: (K,)`` from the per-channel input maxima ``x_absmax: (K,)`` (over calibration tokens) and
    ``weight: (N, K)``; channels that are zero in either keep ``s = 1``."""
    check_number("alpha", alpha, 0, 1, note="the share of difficulty moved")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        got = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"weight must be a matrix (N, K), got {got}")
    K = weight.shape[1]
    if not isinstance(x_absmax, torch.Tensor) or x_absmax.shape != (K,):
        got = tuple(x_absmax.shape) if isinstance(x_absmax, torch.Tensor) else type(x_absmax).__name__
        raise ValueError(f"x_absmax must be (K={K},), the largest |x| of each input channel, got {got}")
    check_finite(x_absmax, "x_absmax")
    a = x_absmax.detach().float().abs()
    w = weight.detach().float().abs().amax(dim=0).to(a.device)  # (K,)
    s = a.pow(alpha) / w.pow(1 - alpha)
    return torch.where((a > 0) & (w > 0), s, torch.ones_like(s))


def smooth_linear(linear: nn.Linear, x: torch.Tensor, alpha: float = 0.5, quantize: bool = True) -> ScaledInput:
    """``linear`` smoothed with factors from its calibration inputs ``x: (n, K)``: ``ScaledInput`` around a W8A8
    ``QuantLinear`` of ``W diag(s)`` (``quantize=False``: around the float ``nn.Linear``, same output as
    ``linear``)."""
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}")
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != linear.in_features or x.shape[0] == 0:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be (n, in_features={linear.in_features}) with n >= 1, got {got}")
    s = smoothing_factors(x.abs().amax(dim=0), linear.weight, alpha).to(linear.weight.device)
    smoothed = scale_columns(linear, s)
    return ScaledInput(QuantLinear.from_linear(smoothed, 8, None, act_bits=8) if quantize else smoothed, s)


def smoothquant_model(model: nn.Module, batches, alpha: float = 0.5, skip: tuple[str, ...] = ()) -> nn.Module:
    """W8A8 with smoothing: every ``nn.Linear`` of ``model`` (in place) becomes ``smooth_linear`` calibrated on
    the inputs it sees while the float model runs ``batches``. A layer tied to an embedding stays unsmoothed and
    weight-only int8, as ``quantize_model(act_bits=8)`` leaves it, so the embedding reads the same codes."""
    return replace_linears_calibrated(
        model, batches, lambda lin, x: smooth_linear(lin, x, alpha), lambda lin: QuantLinear.from_linear(lin, 8), skip
    )

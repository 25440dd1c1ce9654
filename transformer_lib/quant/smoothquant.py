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

from ..utils.checks import check_number, check_tensor, check_type
from .calibration import replace_linears_calibrated
from .channel_scale import ScaledInput, scale_columns
from .linear import QuantLinear


def smoothing_factors(x_absmax: torch.Tensor, weight: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """``s: (K,)`` from the per-channel input maxima ``x_absmax: (K,)`` (over calibration tokens) and
    ``weight: (N, K)``; channels that are zero in either keep ``s = 1``."""
    check_number("alpha", alpha, 0, 1, note="the share of difficulty moved")
    check_tensor("weight", weight, shape=(None, None), note="N, K")
    K = weight.shape[1]
    check_tensor("x_absmax", x_absmax, shape=(K,), finite=True, note="K: the largest |x| of each input channel")
    a = x_absmax.detach().float().abs()
    w = weight.detach().float().abs().amax(dim=0).to(a.device)  # (K,)
    s = a.pow(alpha) / w.pow(1 - alpha)
    return torch.where((a > 0) & (w > 0), s, torch.ones_like(s))


def smooth_linear(linear: nn.Linear, x: torch.Tensor, alpha: float = 0.5, quantize: bool = True) -> ScaledInput:
    """``linear`` smoothed with factors from its calibration inputs ``x: (n, K)``: ``ScaledInput`` around a W8A8
    ``QuantLinear`` of ``W diag(s)`` (``quantize=False``: around the float ``nn.Linear``, same output as
    ``linear``)."""
    check_type("linear", linear, nn.Linear, expected="an nn.Linear")
    check_tensor("x", x, shape=(None, linear.in_features), note="n calibration inputs, in_features")
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

"""Per-input-channel scaling that leaves a linear layer's output unchanged: ``(x / s) (W diag(s))^T = x W^T``.

AWQ and SmoothQuant both multiply column ``j`` of a weight by ``s_j`` and divide input channel ``j`` by ``s_j``:
in float the product is the same, but the quantization grids see different numbers. ``ScaledInput`` applies the
division at run time (one elementwise op); a deployment folds it into the operation before the layer (a
LayerNorm's weight and bias, or the previous linear's rows) where one exists, so it costs nothing.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..utils.checks import check_number, check_tensor, check_type


def check_channel_scale(s: torch.Tensor, in_features: int | None = None) -> None:
    """``s`` must be a positive, finite ``(in_features,)`` tensor (``in_features=None``: any length >= 1)."""
    check_tensor("s", s, shape=(in_features,), finite=True, note="one scale per input channel")
    check_number("s.min()", s.min().item(), min=0, min_open=True, note="each scale divides an input channel")


@torch.no_grad()
def scale_columns(linear: nn.Linear, s: torch.Tensor) -> nn.Linear:
    """A copy of ``linear`` with weight ``W diag(s)``: column ``j`` times ``s_j`` (``W: (N, K)``, ``s: (K,)``)."""
    check_type("linear", linear, nn.Linear, expected="an nn.Linear")
    check_channel_scale(s, linear.in_features)
    w = linear.weight
    out = nn.Linear(
        linear.in_features, linear.out_features, bias=linear.bias is not None, device=w.device, dtype=w.dtype
    )
    out.weight.copy_(w * s.to(w)[None, :])  # (N, K)
    if linear.bias is not None:
        out.bias.copy_(linear.bias)
    return out


class ScaledInput(nn.Module):
    """``module(x / s)``: the division AWQ and SmoothQuant pair with a weight whose columns were multiplied by
    ``s``. ``x: (..., K)`` -> ``module``'s output; ``s: (K,)`` is stored as a float32 buffer ``scale``."""

    def __init__(self, module: nn.Module, s: torch.Tensor):
        super().__init__()
        check_type("module", module, nn.Module, expected="an nn.Module")
        check_channel_scale(s)  # (K,)
        self.module = module
        self.register_buffer("scale", s.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, shape=(..., self.scale.shape[0]), note="..., K: one input per scale")
        return self.module(x / self.scale.to(x.dtype))

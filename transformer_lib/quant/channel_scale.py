"""Per-input-channel scaling that leaves a linear layer's output unchanged: ``(x / s) (W diag(s))^T = x W^T``.

AWQ and SmoothQuant both multiply column ``j`` of a weight by ``s_j`` and divide input channel ``j`` by ``s_j``:
in float the product is the same, but the quantization grids see different numbers. ``ScaledInput`` applies the
division at run time (one elementwise op); a deployment folds it into the operation before the layer (a
LayerNorm's weight and bias, or the previous linear's rows) where one exists, so it costs nothing.
"""

from __future__ import annotations

import torch
import torch.nn as nn


def check_channel_scale(s: torch.Tensor, in_features: int) -> None:
    """``s`` must be a positive, finite ``(in_features,)`` tensor."""
    if not isinstance(s, torch.Tensor) or s.shape != (in_features,):
        got = tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__
        raise ValueError(f"s must be a tensor of shape (in_features={in_features},), got {got}")
    if not torch.isfinite(s).all() or (s <= 0).any():
        raise ValueError(f"s must hold positive finite values, got values in [{s.min().item()}, {s.max().item()}]")


@torch.no_grad()
def scale_columns(linear: nn.Linear, s: torch.Tensor) -> nn.Linear:
    """A copy of ``linear`` with weight ``W diag(s)``: column ``j`` times ``s_j`` (``W: (N, K)``, ``s: (K,)``)."""
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}")
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
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
        if not isinstance(s, torch.Tensor) or s.dim() != 1:
            got = tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__
            raise ValueError(f"s must be a 1-d tensor (K,) of per-channel scales, got {got}")
        check_channel_scale(s, s.shape[0])
        self.module = module
        self.register_buffer("scale", s.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.scale.shape[0]:
            raise ValueError(f"x must be (..., K={self.scale.shape[0]}), got {tuple(x.shape)}")
        return self.module(x / self.scale.to(x.dtype))

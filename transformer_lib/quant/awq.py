"""AWQ (Lin et al. 2023): activation-aware weight quantization. The weights that meet large inputs matter most, so
before rounding, column ``j`` of the weight is multiplied by ``s_j = mean|x_j|^alpha`` and input channel ``j``
divided by it: in float nothing changes (``(x / s) (W diag(s))^T = x W^T``), but the important columns now use
more of the integer grid, so their relative rounding error shrinks. ``alpha`` is searched over a small grid
(``alpha = 0`` is plain round-to-nearest) for the smallest output error on the calibration inputs; the scales are
normalized by ``sqrt(max(s) min(s))`` and kept above 1e-4, as in the reference code. The quantized weight is an
ordinary ``QuantLinear`` (absmax, float16 scales) behind ``ScaledInput``, which divides the input by ``s``.

Used in chapter 09.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from ..utils.checks import check_int, check_tensor, check_type
from .calibration import replace_linears_calibrated
from .channel_scale import ScaledInput, scale_columns
from .grids import check_bits
from .linear import QuantLinear, rtn_weight


@dataclass
class AWQScales:
    """The search's result: ``scale: (K,)`` the chosen ``s``, ``alpha`` its exponent, and the output MSE on the
    calibration inputs for every ``alphas[i]`` tried (``errors[i]``; ``errors[0]`` is round-to-nearest's)."""

    scale: torch.Tensor
    alpha: float
    alphas: torch.Tensor
    errors: torch.Tensor


@torch.no_grad()
def awq_scales(
    weight: torch.Tensor, x: torch.Tensor, bits: int = 4, group_size: int | None = None, n_grid: int = 20
) -> AWQScales:
    """Search ``s = mean|x|^alpha`` for ``alpha`` in ``0, 1/n_grid, ..., 1``: ``weight: (N, K)``, calibration
    inputs ``x: (n, K)``; the error is ``mean((x / s) Q(W s)^T - x W^T)^2`` with ``Q`` round-to-nearest."""
    check_bits(bits)
    # the weight's finiteness here, or quantize (in rtn_weight) would blame an inf on its own argument, x
    check_tensor("weight", weight, shape=(None, None), floating=True, finite=True, note="N, K")
    check_tensor("x", x, shape=(None, weight.shape[1]), finite=True, note="n calibration inputs, K")
    check_int("n_grid", n_grid, min=1, note="alphas 0, 1/n_grid, ..., 1")
    w, x = weight.detach().float(), x.detach().float().to(weight.device)
    ref = x @ w.T  # (n, N): the float layer's output
    x_mean = x.abs().mean(dim=0)  # (K,): how large each input channel is on average
    alphas = torch.linspace(0, 1, n_grid + 1)
    errors, candidates = [], []
    for alpha in alphas.tolist():
        s = x_mean.pow(alpha).clamp(min=1e-4)  # (K,)
        s = s / (s.max() * s.min()).sqrt()
        out = (x / s) @ rtn_weight(w * s, bits, group_size).T  # (n, N)
        errors.append((out - ref).pow(2).mean().item())
        candidates.append(s)
    best = min(range(len(errors)), key=errors.__getitem__)
    return AWQScales(candidates[best], alphas[best].item(), alphas, torch.tensor(errors))


def awq_linear(
    linear: nn.Linear, x: torch.Tensor, bits: int = 4, group_size: int | None = None, n_grid: int = 20
) -> ScaledInput:
    """``ScaledInput(QuantLinear of W diag(s), s)`` with AWQ's ``s`` for ``linear`` on its inputs ``x: (n, K)``."""
    check_type("linear", linear, nn.Linear, expected="an nn.Linear")
    found = awq_scales(linear.weight, x, bits, group_size, n_grid)
    return ScaledInput(QuantLinear.from_linear(scale_columns(linear, found.scale), bits, group_size), found.scale)


def awq_quantize_model(
    model: nn.Module,
    batches,
    bits: int = 4,
    group_size: int | None = None,
    n_grid: int = 20,
    skip: tuple[str, ...] = (),
) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (in place) by ``awq_linear`` calibrated on the inputs each layer
    sees while the float model runs ``batches``. A layer whose weight is tied to an embedding (GPT's ``lm_head``)
    keeps ``s = 1`` (round-to-nearest), so the embedding can read the same codes (``QuantEmbedding``)."""
    check_bits(bits)
    return replace_linears_calibrated(
        model,
        batches,
        lambda lin, x: awq_linear(lin, x, bits, group_size, n_grid),
        lambda lin: QuantLinear.from_linear(lin, bits, group_size),
        skip,
        group_size,
    )

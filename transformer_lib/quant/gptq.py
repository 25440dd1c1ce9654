"""GPTQ (Frantar et al. 2022): round a layer's weight one input column at a time, and after each column push its
rounding error onto the columns not yet rounded, weighted by the inverse Hessian of the layer's squared output
error, so the *output* ``x W^T`` on calibration inputs moves as little as possible.

Used in chapter 09.

For inputs ``X: (n, K)`` the error ``||X W^T - X W_hat^T||^2`` has Hessian ``H = 2 X^T X`` (``(K, K)``, the same
for every output row). Rounding column ``i`` by ``e_i = w_i - q_i`` is best compensated by the update
``W[:, i:] -= e_i / U_ii * U[i, i:]`` with ``U`` the upper Cholesky factor of ``H^-1`` (``H^-1 = U^T U``), which
applies the Optimal Brain Surgeon update of every later column at once. ``damp`` adds a fraction of the mean
diagonal to ``H`` so that the inverse exists when inputs are correlated or rare. With ``group_size``, each group's
scale is set from the (already updated) weights when its first column is reached, as in the reference code.
The paper's lazy batch updates are kept (``block`` columns at a time: the error spreads inside the block column by
column, and onto the columns after it in one matrix product, the same result with far less memory traffic); its
"act order" refinement is left out for readability.
The codes land in a ``QuantLinear`` (absmax, float16 scales) like round-to-nearest's.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..utils.checks import check_int, check_number, check_tensor, check_type
from .calibration import replace_linears_calibrated
from .grids import QuantizedTensor, check_bits, int_range, quantize
from .linear import QuantLinear


def layer_hessian(x: torch.Tensor) -> torch.Tensor:
    """``H = 2 X^T X / n`` in float64 for calibration inputs ``x: (n, K)`` -> ``(K, K)`` (the mean over inputs:
    the scale of ``H`` does not change GPTQ's result)."""
    check_tensor("x", x, shape=(None, None), floating=True, finite=True, note="n calibration inputs, K")
    x = x.double()
    return 2 * x.T @ x / x.shape[0]  # (K, K)


def _inverse_hessian_factor(h: torch.Tensor, damp: float) -> torch.Tensor:
    """Upper Cholesky factor ``U`` of ``(H + damp * mean(diag H) * I)^-1``: ``(K, K)`` float64."""
    h = h.clone()
    h.diagonal().add_(damp * h.diagonal().mean())
    try:
        h_inv = torch.cholesky_inverse(torch.linalg.cholesky(h))
        return torch.linalg.cholesky(h_inv, upper=True)
    except torch.linalg.LinAlgError as e:
        raise ValueError(
            "hessian must be symmetric positive semi-definite (2 X^T X / n, as layer_hessian makes it); "
            f"with damp={damp} x its mean diagonal added, the Cholesky factorization failed: {e}"
        ) from None


@torch.no_grad()
def gptq_quantize(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    bits: int = 4,
    group_size: int | None = None,
    damp: float = 0.01,
    block: int = 128,
) -> QuantizedTensor:
    """GPTQ codes for ``weight: (N, K)`` given ``hessian: (K, K)`` (``layer_hessian``): absmax, one float16 scale
    per row (``group_size=None``) or per ``group_size`` columns of a row. Returns a ``QuantizedTensor`` whose
    ``dequantize()`` is the chosen weight. ``block``: columns per lazy update (rounded to whole groups; any value
    gives the same codes up to float rounding)."""
    check_bits(bits)
    check_tensor("weight", weight, shape=(None, None), floating=True, finite=True, note="N, K")
    N, K = weight.shape
    # a NaN calibration input makes a NaN H: say so here, not in linalg.cholesky
    check_tensor("hessian", hessian, shape=(K, K), finite=True, note="K, K: layer_hessian of the inputs")
    check_number("damp", damp, min=0, min_open=True, note="a fraction of H's mean diagonal, e.g. 0.01")
    check_int("group_size", group_size, min=1, optional="one scale per row")
    check_int("weight.shape[1]", K, multiple_of=group_size, note=f"whole groups of group_size={group_size}")
    check_int("block", block, min=1, note="columns per lazy update")
    W = weight.detach().double().clone()  # (N, K), updated in place as columns are rounded
    h = hessian.detach().double().to(W.device)
    dead = h.diagonal() == 0  # inputs that are always zero: their weights do not matter
    h[dead, dead] = 1.0
    W[:, dead] = 0.0
    U = _inverse_hessian_factor(h, float(damp))  # (K, K) upper triangular
    G = group_size or K
    B = block if group_size is None else G * max(1, block // G)  # whole groups per block: a scale sees current weights
    qmax = int_range(bits)[1]
    q = torch.zeros(N, K, dtype=torch.int8, device=W.device)
    scales = []
    for b0 in range(0, K, B):
        b1 = min(b0 + B, K)
        errs = torch.zeros(N, b1 - b0, dtype=W.dtype, device=W.device)  # (N, block): the scaled errors
        for i in range(b0, b1):
            if i % G == 0:  # a new group: its scale from the weights as they are now
                s = quantize(W[:, i : i + G].float(), bits, True, "channel", scale_dtype=torch.float16).scale  # (N, 1)
                scales.append(s)
                sd = s[:, 0].double()  # (N,)
            col = torch.round(W[:, i] / sd).clamp(-qmax, qmax)  # (N,)
            q[:, i] = col.to(torch.int8)
            err = errs[:, i - b0] = (W[:, i] - col * sd) / U[i, i]  # (N,)
            W[:, i + 1 : b1] -= (
                err[:, None] * U[i, i + 1 : b1][None, :]
            )  # spread the error over the block's later columns
        W[:, b1:] -= errs @ U[b0:b1, b1:]  # and, in one product, over every column after the block
    return QuantizedTensor(
        q, torch.cat(scales, dim=1), None, bits, "channel" if group_size is None else "group", group_size
    )


def gptq_linear(
    linear: nn.Linear, x: torch.Tensor, bits: int = 4, group_size: int | None = None, damp: float = 0.01
) -> QuantLinear:
    """A ``QuantLinear`` holding GPTQ's codes for ``linear``, calibrated on its inputs ``x: (n, in_features)``."""
    check_type("linear", linear, nn.Linear, expected="an nn.Linear")
    check_tensor("x", x, shape=(None, linear.in_features), note="n calibration inputs, in_features")
    qt = gptq_quantize(linear.weight, layer_hessian(x.to(linear.weight.device)), bits, group_size, damp)
    return QuantLinear.from_codes(qt.q, qt.scale, linear.bias, group_size, bits)


def gptq_quantize_model(
    model: nn.Module,
    batches,
    bits: int = 4,
    group_size: int | None = None,
    damp: float = 0.01,
    skip: tuple[str, ...] = (),
) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (in place) by GPTQ's ``QuantLinear``, calibrated on the inputs
    each layer sees while the float model runs ``batches`` (``calibration_inputs``). Names in ``skip`` stay
    float; an embedding tied to a quantized layer reads its codes (``QuantEmbedding``), as in ``quantize_model``.
    Every layer is calibrated on the float model's inputs (the paper feeds each layer the already-quantized
    previous layers' outputs, a small further gain)."""
    check_bits(bits)
    return replace_linears_calibrated(
        model, batches, lambda lin, x: gptq_linear(lin, x, bits, group_size, damp), skip=skip, group_size=group_size
    )

"""Int8 activations (W8A8): per-token dynamic quantization, an exact int8 x int8 -> int32 product on any device,
and LLM.int8()-style outlier columns kept in float (Dettmers et al. 2022).

Used in chapter 09.
"""

from __future__ import annotations

import torch

from .grids import fake_quantize


# ----------------------------------------------------------------------------- activations
def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic absmax int8 for activations: one scale per token (row). ``x: (M, K)`` -> ``(q int8 (M, K),
    scale (M, 1))``; computed at run time for each input, as LLM.int8() and SmoothQuant do."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
        got = f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a floating-point tensor (M, K), got {got}")
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp_min_(1e-12).div_(127)  # (M, 1)
    return torch.round(x / scale).to(torch.int8), scale  # |x / scale| <= 127: no clamp needed


def _check_int8_pair(xq: torch.Tensor, wq: torch.Tensor) -> None:
    if xq.dtype != torch.int8 or wq.dtype != torch.int8 or xq.dim() != 2 or wq.dim() != 2 or xq.shape[1] != wq.shape[1]:
        raise ValueError(
            f"xq (M, K) and wq (N, K) must be int8 matrices sharing K, got xq {xq.dtype} "
            f"{tuple(xq.shape)} and wq {wq.dtype} {tuple(wq.shape)}"
        )
    if xq.device != wq.device:
        raise ValueError(f"xq and wq must be on one device, got {xq.device} and {wq.device}")


def int8_matmul(xq: torch.Tensor, wq: torch.Tensor) -> torch.Tensor:
    """``xq: (M, K) int8 @ wq: (N, K) int8 ^T -> (M, N) int32``, exact integer sums.

    ``torch._int_mm`` on CPU takes any shape; on CUDA it needs M > 16 and K, N multiples of 8, so other shapes
    (e.g. one decoding position, M = 1) are zero-padded to fit (``padded_int_mm``): zero rows and columns add
    nothing to the sums, and the result is sliced back. An fp16 product would not be exact (sums reach
    ``K * 127^2``), and a float64 one runs at a small fraction of a GPU's integer speed.
    """
    _check_int8_pair(xq, wq)
    M, K = xq.shape
    N = wq.shape[0]
    if xq.device.type == "cpu" or (M > 16 and K % 8 == 0 and N % 8 == 0):
        return torch._int_mm(xq, wq.t())
    return padded_int_mm(xq, wq)


def padded_int_mm(xq: torch.Tensor, wq: torch.Tensor) -> torch.Tensor:
    """``torch._int_mm`` on shapes CUDA's kernel refuses: pad ``xq: (M, K)`` to ``(max(M, 17), K8)`` and
    ``wq: (N, K)`` to ``(N8, K8)`` with zeros (``K8``, ``N8``: rounded up to multiples of 8), multiply, and return
    the ``(M, N)`` int32 corner. Exact: padded entries are zero. Runs on CPU too (where it is not needed), so the
    padding is tested there."""
    _check_int8_pair(xq, wq)
    M, K = xq.shape
    N = wq.shape[0]
    Mp, Kp, Np = max(M, 17), -(-K // 8) * 8, -(-N // 8) * 8
    xp = xq.new_zeros(Mp, Kp)
    xp[:M, :K] = xq
    wp = wq.new_zeros(Np, Kp)
    wp[:N, :K] = wq
    return torch._int_mm(xp, wp.t())[:M, :N]


def keep_outliers(x: torch.Tensor, n_outliers: int, bits: int = 8) -> torch.Tensor:
    """Per-tensor fake quantization of ``x: (M, K)`` with the ``n_outliers`` feature columns of largest magnitude
    kept in float: those columns no longer set the scale. A simplified form of LLM.int8()'s mixed-precision
    decomposition, which picks the columns by a magnitude threshold (6.0) and quantizes the rest per token."""
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor (M, K), got {x.dtype} {tuple(x.shape)}")
    if not isinstance(n_outliers, int) or isinstance(n_outliers, bool):
        raise TypeError(f"n_outliers must be an int, got {type(n_outliers).__name__} {n_outliers!r}")
    if not 0 <= n_outliers < x.shape[-1]:
        raise ValueError(f"n_outliers must be in [0, K={x.shape[-1]}), got {n_outliers}")
    cols = x.abs().amax(dim=0).topk(n_outliers).indices  # (n_outliers,)
    keep = torch.zeros(x.shape[-1], dtype=torch.bool, device=x.device)
    keep[cols] = True
    inliers = x.masked_fill(keep, 0.0)
    return torch.where(keep, x, fake_quantize(inliers, bits, granularity="tensor"))

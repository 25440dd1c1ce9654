"""Int8 activations (W8A8): per-token dynamic quantization, an exact int8 x int8 -> int32 product on any device,
and LLM.int8()-style outlier columns kept in float (Dettmers et al. 2022).

Used in chapter 09.
"""

from __future__ import annotations

import torch

from ..utils.checks import check_choice, check_equal, check_int, check_tensor
from .grids import fake_quantize


# ----------------------------------------------------------------------------- activations
def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic absmax int8 for activations: one scale per token (row). ``x: (M, K)`` -> ``(q int8 (M, K),
    scale (M, 1))``; computed at run time for each input, as LLM.int8() and SmoothQuant do."""
    check_tensor("x", x, floating=True)
    check_equal("x.dim()", x.dim(), 2, note="x is (M, K)")  # not shape=(None, None): M = 0 (an empty batch) is fine
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp_min_(1e-12).div_(127)  # (M, 1)
    return torch.round(x / scale).to(torch.int8), scale  # |x / scale| <= 127: no clamp needed


def _check_int8_pair(xq: torch.Tensor, wq: torch.Tensor) -> None:
    """``xq: (M, K)`` and ``wq: (N, K)``: int8 matrices sharing ``K``, on one device."""
    check_tensor("xq", xq, dtype=torch.int8)
    check_equal("xq.dim()", xq.dim(), 2, note="xq is (M, K)")
    check_tensor("wq", wq, shape=(None, xq.shape[1]), dtype=torch.int8, device=xq.device, note="N, K of xq")


INT8_KERNELS = ("int_mm", "float32")  # how int8_matmul computes: torch._int_mm, or exact float32 chunks
FLOAT32_EXACT_K = 2**24 // 128**2  # 1,024 inputs: every partial sum is an integer of magnitude <= 2^24


def int8_matmul(xq: torch.Tensor, wq: torch.Tensor, kernel: str = "int_mm") -> torch.Tensor:
    """``xq: (M, K) int8 @ wq: (N, K) int8 ^T -> (M, N) int32``, exact integer sums.

    ``kernel="float32"`` computes the same integers with float32 products (``float32_int8_matmul``); the default,
    ``"int_mm"``, is the integer kernel that W8A8 exists for, and the one the book times.

    ``torch._int_mm`` on CPU takes any shape; on CUDA it needs M > 16 and K, N multiples of 8, so other shapes
    (e.g. one decoding position, M = 1) are zero-padded to fit (``padded_int_mm``): zero rows and columns add
    nothing to the sums, and the result is sliced back. An fp16 product would not be exact (sums reach
    ``K * 127^2``), and a float64 one runs at a small fraction of a GPU's integer speed.
    """
    check_choice("kernel", kernel, INT8_KERNELS)
    _check_int8_pair(xq, wq)
    if kernel == "float32":
        return float32_int8_matmul(xq, wq)
    M, K = xq.shape
    N = wq.shape[0]
    if xq.device.type == "cpu" or (M > 16 and K % 8 == 0 and N % 8 == 0):
        return torch._int_mm(xq, wq.t())
    return padded_int_mm(xq, wq)


def float32_int8_matmul(xq: torch.Tensor, wq: torch.Tensor) -> torch.Tensor:
    """The integers of ``torch._int_mm(xq, wq.t())`` (``xq: (M, K)``, ``wq: (N, K)`` int8 -> ``(M, N)`` int32),
    computed as float32 matrix products over chunks of at most ``FLOAT32_EXACT_K`` = 1,024 inputs, added in int32.

    Exact, not approximate: a chunk's partial sums, in whatever order the BLAS adds them, are integers of magnitude
    at most 1024 * 128^2 = 2^24, and float32 holds every integer up to 2^24. On a CPU without int8 dot-product
    instructions (AVX2 without VNNI) ``torch._int_mm`` runs far slower than float32 GEMM, so chapter 09 measures
    W8A8's *quality* this way (``int8_kernel``) and times its *speed* on ``torch._int_mm``. Needs float32 products
    at full precision (no TF32 or bfloat16 shortcut), which is PyTorch's default.
    """
    _check_int8_pair(xq, wq)
    if torch.get_float32_matmul_precision() != "highest" or (
        xq.device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
    ):
        raise RuntimeError(
            "float32_int8_matmul needs full float32 products: torch.set_float32_matmul_precision('highest') and "
            f"torch.backends.cuda.matmul.allow_tf32 = False, got {torch.get_float32_matmul_precision()!r} and "
            f"{torch.backends.cuda.matmul.allow_tf32}"
        )
    acc = torch.zeros(xq.shape[0], wq.shape[0], dtype=torch.int32, device=xq.device)  # (M, N)
    for k in range(0, xq.shape[1], FLOAT32_EXACT_K):
        chunk = xq[:, k : k + FLOAT32_EXACT_K].float() @ wq[:, k : k + FLOAT32_EXACT_K].float().T  # (M, N), exact
        acc += chunk.to(torch.int32)
    return acc


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
    check_tensor("x", x, shape=(None, None), floating=True, note="M, K")
    n_outliers = check_int("n_outliers", n_outliers, min=0, max=x.shape[1] - 1, note=f"fewer than K={x.shape[1]}")
    cols = x.abs().amax(dim=0).topk(n_outliers).indices  # (n_outliers,)
    keep = torch.zeros(x.shape[-1], dtype=torch.bool, device=x.device)
    keep[cols] = True
    inliers = x.masked_fill(keep, 0.0)
    return torch.where(keep, x, fake_quantize(inliers, bits, granularity="tensor"))

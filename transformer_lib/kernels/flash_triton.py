"""The tiled attention forward pass as a Triton kernel (FlashAttention-2's loop order, Dao 2023).

Used in chapter 10.

One program computes one block of ``BLOCK_M`` queries of one (batch, head): it loads its queries once, walks over
the keys and values in blocks of ``BLOCK_N``, keeps the running maximum ``m_i``, sum ``l_i`` and output ``acc`` in
registers (on a GPU; in NumPy arrays under the interpreter), and writes its output once. The scores of a tile never
leave the program. The same source compiles for CUDA and runs in Triton's interpreter on the CPU
(``TRITON_INTERPRET=1`` set before this module is imported; see ``transformer_lib.kernels``).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..utils.checks import check_choice, check_int, check_tensor
from . import interpreter_requested


@triton.jit
def flash_forward_kernel(
    Q,
    K,
    V,
    Out,
    stride_qb,
    stride_qh,
    stride_qt,
    stride_kb,
    stride_kh,
    stride_kt,
    stride_vb,
    stride_vh,
    stride_vt,
    stride_ob,
    stride_oh,
    stride_ot,
    n_heads,
    t_q,
    t_k,
    d_head,
    scale,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
):
    block = tl.program_id(0)  # which block of queries
    bh = tl.program_id(1)  # which (batch, head)
    b, h = bh // n_heads, bh % n_heads
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query positions
    dims = tl.arange(0, BLOCK_D)  # (BLOCK_D,) head dimensions, padded to a power of two
    q = tl.load(
        Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :],
        mask=(rows[:, None] < t_q) & (dims[None, :] < d_head),
        other=0.0,
    )  # (BLOCK_M, BLOCK_D)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running maximum of each query's scores
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # running unnormalised output
    offset = t_k - t_q  # causal: query i sees key j when j <= i + offset
    end = t_k
    if CAUSAL:
        end = tl.minimum(t_k, (block + 1) * BLOCK_M + offset)  # later key blocks are all masked: skip them
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key positions
        k = tl.load(
            K + b * stride_kb + h * stride_kh + cols[None, :] * stride_kt + dims[:, None],
            mask=(cols[None, :] < t_k) & (dims[:, None] < d_head),
            other=0.0,
        )  # (BLOCK_D, BLOCK_N): K^T
        s = tl.dot(q, k, input_precision=PRECISION) * scale  # (BLOCK_M, BLOCK_N) scores, fp32
        visible = (cols[None, :] < t_k) & (rows[:, None] >= 0)
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + offset)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no visible key yet
        p = tl.exp(s - m_safe[:, None])  # this tile's weights, before normalising
        alpha = tl.exp(m_i - m_safe)  # rescales the old sum and output to the new maximum
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :],
            mask=(cols[:, None] < t_k) & (dims[None, :] < d_head),
            other=0.0,
        )  # (BLOCK_N, BLOCK_D)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # divide once, at the end; no visible key: zeros
    tl.store(
        Out + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + dims[None, :],
        out.to(Out.dtype.element_ty),
        mask=(rows[:, None] < t_q) & (dims[None, :] < d_head),
    )


INTERPRETED = all(type(f).__name__ == "InterpretedFunction" for f in (flash_forward_kernel, tl.zeros))
"""True when this kernel *and* Triton's own library (``tl.zeros``, ...) were built interpreted: ``TRITON_INTERPRET=1``
was set before ``triton`` was first imported, so the kernel runs on the CPU. (PyTorch may import ``triton`` itself,
e.g. on entering a ``TorchDispatchMode``: set the variable at the start of the process.)"""


BLOCK_SIZES = tuple(2**i for i in range(4, 13))
"""The tile sizes ``block_m`` and ``block_n`` may take: powers of two from 16 (``tl.dot``'s smallest tile) to 4096."""


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, block_m: int = 16, block_n: int = 16
) -> torch.Tensor:
    """``softmax(q k^T / sqrt(D)) v`` by the Triton kernel: ``q: (B, H, Tq, D)``, ``k, v: (B, H, Tk, D)`` ->
    ``(B, H, Tq, D)`` in q's dtype (fp32 accumulation inside). ``causal`` aligns queries to the end of the keys;
    ``block_m``, ``block_n``: the query and key tiles' sizes, each one of ``BLOCK_SIZES``.

    CUDA tensors run compiled; CPU tensors need the interpreter (``TRITON_INTERPRET=1`` before the import), which
    refuses bfloat16 (it computes it wrongly).
    """
    check_tensor("q", q, ("B", "H", "Tq", "D"), dtype=(torch.float16, torch.bfloat16, torch.float32))
    like_q = dict(dtype=q.dtype, device=q.device, note="(B, H, Tk, D), B, H, D and dtype as in q")
    check_tensor("k", k, (*q.shape[:2], None, q.shape[3]), **like_q)
    check_tensor("v", v, tuple(k.shape), **like_q)
    if causal:
        check_int("k.shape[2]", k.shape[2], min=q.shape[2], note="Tk: causal needs at least Tq = q.shape[2] keys")
    check_int("q.shape[3]", q.shape[3], max=256, note="the head dimension D")
    check_choice("block_m", check_int("block_m", block_m), BLOCK_SIZES)
    check_choice("block_n", check_int("block_n", block_n), BLOCK_SIZES)
    if INTERPRETED and q.dtype == torch.bfloat16:  # NumPy has no bfloat16: the interpreter reads its bits wrongly
        raise ValueError(
            "q must not be bfloat16 under Triton's interpreter (TRITON_INTERPRET=1), whose bfloat16 outputs are "
            "garbage (around 1e8); use float16 or float32 there, or run on a CUDA device without the interpreter"
        )
    if q.device.type == "cpu" and not INTERPRETED:
        raise RuntimeError(
            "CPU tensors run only in Triton's interpreter: set TRITON_INTERPRET=1 at the start of a "
            "fresh Python process, before triton is first imported (PyTorch may import it itself); "
            f"now TRITON_INTERPRET={'1' if interpreter_requested() else 'unset'}. Or move q, k, v "
            "to a CUDA device"
        )
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    B, H, t_q, d_head = q.shape
    grid = (triton.cdiv(t_q, block_m), B * H)
    flash_forward_kernel[grid](
        q,
        k,
        v,
        out,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *out.stride()[:3],
        H,
        t_q,
        k.shape[2],
        d_head,
        1.0 / math.sqrt(d_head),
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(d_head)),
        PRECISION="ieee" if q.dtype == torch.float32 else None,
    )  # fp32: exact products, no TF32
    return out

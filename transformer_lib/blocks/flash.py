"""Attention without the T x T matrix: tiles, an online softmax, and split-K decoding.

Used in chapter 10.

Standard attention writes the scores ``S = Q K^T / sqrt(D)`` (``(..., Tq, Tk)``) to memory, then the weights
``P = softmax(S)``, then reads ``P`` back for ``P V``: memory and traffic grow with ``Tq * Tk``. The softmax can
instead be computed in one pass over blocks of keys (Milakov & Gimelshein 2018, "Online normalizer calculation
for softmax"), keeping per query only a running maximum ``m``, a running sum ``l`` of ``exp(s - m)`` and an
unnormalised output ``o``. When a new block raises the maximum from ``m`` to ``m'``, the old ``l`` and ``o`` are
rescaled by ``exp(m - m')``. FlashAttention (Dao et al. 2022) runs this loop inside one GPU kernel so that the
scores of a tile live only in on-chip SRAM; FlashAttention-2 (Dao 2023) puts the loop over queries outside and
divides by ``l`` once at the end, as here.

Shapes: ``q: (B, H, Tq, D)``, ``k: (B, H, Tk, D)``, ``v: (B, H, Tk, Dv)``; a ``key_mask: (B, Tk)`` is ``True`` on
real keys (the library's boolean convention); ``causal`` aligns queries to the *end* of the keys, as
``masking.causal_mask``. A query that may see no key gets zeros, never NaN.

Gradients: autograd differentiates through the tiles (``tiled_attention``), which keeps every tile's weights
for the backward pass, so training memory stays quadratic. The paper's backward instead stores only the output
and ``L = m + log l`` per query and *recomputes* each tile's scores and weights from Q, K and ``L`` while it
accumulates dQ, dK, dV; ``FlashAttentionFunction`` does that.
"""

from __future__ import annotations

import math

import torch

from ..utils.checks import check_int, check_number, check_sequence, check_tensor


def _check_inputs(q, k, v, key_mask, block_q: int, block_k: int) -> None:
    """``q (B, H, Tq, D)``, ``k (B, H, Tk, D)``, ``v (B, H, Tk, Dv)`` of one floating dtype and device; block sizes
    >= 1; ``key_mask``: None or a boolean ``(B, Tk)``."""
    B, H, _, D = check_tensor("q", q, shape=("B", "H", "Tq", "D"), floating=True).shape
    check_tensor("k", k, shape=(B, H, "Tk", D), dtype=q.dtype, device=q.device, note="B, H, D as q's; Tk >= 1 keys")
    check_tensor("v", v, shape=(B, H, k.shape[2], "Dv"), dtype=q.dtype, device=q.device, note="B, H as q's, Tk as k's")
    check_int("block_q", block_q, min=1)
    check_int("block_k", block_k, min=1)
    check_tensor(
        "key_mask", key_mask, shape=(B, k.shape[2]), dtype=torch.bool, note="B, Tk: True on real keys", optional=True
    )


def tile_mask(i0: int, i1: int, j0: int, j1: int, t_q: int, t_k: int, causal: bool, key_mask, device):
    """Boolean mask of the tile of queries ``i0:i1`` and keys ``j0:j1`` (True = may attend), or None if all True.

    Shape ``(B or 1, 1, i1 - i0, j1 - j0)``; causal means key ``j`` is visible to query ``i`` when
    ``j <= i + (t_k - t_q)``.
    """
    allowed = None
    if causal:
        rows = torch.arange(i0, i1, device=device)[:, None] + (t_k - t_q)
        allowed = (torch.arange(j0, j1, device=device)[None, :] <= rows)[None, None]  # (1, 1, bq, bk)
    if key_mask is not None:
        keys = key_mask[:, None, None, j0:j1]  # (B, 1, 1, bk)
        allowed = keys if allowed is None else allowed & keys
    return allowed


def online_softmax_step(m, row_sum, o, scores, v_tile):
    """One tile of the online softmax: fold ``scores: (..., bq, bk)`` and ``v_tile: (..., bk, Dv)`` into the
    running max ``m: (..., bq)``, sum ``row_sum: (..., bq)`` (``l`` above) and unnormalised output
    ``o: (..., bq, Dv)``.

    Returns the new ``(m, row_sum, o)``. Masked scores are ``-inf``; a row that has seen only ``-inf`` keeps
    ``m = -inf``, ``row_sum = 0``, ``o = 0``.
    """
    m_new = torch.maximum(m, scores.amax(dim=-1))  # (..., bq)
    m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # exp(-inf - (-inf)) would be NaN
    p = torch.exp(scores - m_safe[..., None])  # (..., bq, bk): this tile's weights, before normalising
    alpha = torch.exp(m - m_safe)  # (..., bq): how much the old sum and output shrink under the new max
    row_sum_new = alpha * row_sum + p.sum(dim=-1)
    o_new = alpha[..., None] * o + p.to(v_tile.dtype) @ v_tile
    return m_new, row_sum_new, o_new


def _visible_tiles(i0, i1, t_q, t_k, block_k, causal):
    """Start indices of the key tiles that a causal query block ``i0:i1`` can see at all (all tiles otherwise)."""
    last = t_k if not causal else min(t_k, i1 - 1 + (t_k - t_q) + 1)
    return range(0, max(last, 0), block_k)


def attention_with_lse(
    q, k, v, *, causal: bool = False, key_mask=None, block_q: int = 64, block_k: int = 64, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled attention and the log-sum-exp of each query's scores: ``(out: (B, H, Tq, Dv), lse: (B, H, Tq))``.

    Loops over query blocks of ``block_q`` rows (outer) and key blocks of ``block_k`` columns (inner), never
    holding more than one ``(block_q, block_k)`` tile of scores. Computes in fp32 and returns ``out`` in q's dtype.
    ``lse`` is ``-inf`` for a query that sees no key (and its output is 0).
    """
    _check_inputs(q, k, v, key_mask, block_q, block_k)
    check_number("scale", scale, min=0, min_open=True, note="multiplies q k^T", optional="1/sqrt(D)")
    t_q, t_k = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)  # fp32 accumulation (fp64 stays fp64)
    qf, kf, vf = q.to(acc), k.to(acc), v.to(acc)
    outs, lses = [], []
    for i0 in range(0, t_q, block_q):
        i1 = min(i0 + block_q, t_q)
        q_tile = qf[:, :, i0:i1] * scale  # (B, H, bq, D)
        m = torch.full(q_tile.shape[:3], -math.inf, device=q.device, dtype=acc)  # (B, H, bq)
        row_sum = torch.zeros_like(m)
        o = torch.zeros(*q_tile.shape[:3], v.shape[-1], device=q.device, dtype=acc)  # (B, H, bq, Dv)
        for j0 in _visible_tiles(i0, i1, t_q, t_k, block_k, causal):
            j1 = min(j0 + block_k, t_k)
            scores = q_tile @ kf[:, :, j0:j1].transpose(-1, -2)  # (B, H, bq, bk): the only scores in memory
            allowed = tile_mask(i0, i1, j0, j1, t_q, t_k, causal, key_mask, q.device)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, -math.inf)
            m, row_sum, o = online_softmax_step(m, row_sum, o, scores, vf[:, :, j0:j1])
        seen = row_sum > 0
        outs.append(torch.where(seen[..., None], o / torch.where(seen, row_sum, 1.0)[..., None], 0.0))
        lses.append(torch.where(seen, m + torch.log(torch.where(seen, row_sum, 1.0)), -math.inf))
    return torch.cat(outs, dim=2).to(q.dtype), torch.cat(lses, dim=2)


def tiled_attention(
    q, k, v, *, causal: bool = False, key_mask=None, block_q: int = 64, block_k: int = 64, scale: float | None = None
) -> torch.Tensor:
    """``softmax(q k^T * scale + mask) v`` block by block (see ``attention_with_lse``): ``(B, H, Tq, Dv)``.

    Equal to ``F.scaled_dot_product_attention`` up to float rounding; differentiable through the tiles.
    """
    return attention_with_lse(q, k, v, causal=causal, key_mask=key_mask, block_q=block_q, block_k=block_k, scale=scale)[
        0
    ]


def merge_partials(outs: list[torch.Tensor], lses: list[torch.Tensor]) -> torch.Tensor:
    """Combine attention over disjoint key sets: each ``outs[s]: (..., Tq, Dv)`` normalised over its own keys,
    with ``lses[s]: (..., Tq)`` the log-sum-exp of its scores. The exact result over all keys is the sum of the
    parts weighted by ``exp(lse_s - lse)``, where ``lse = logsumexp_s(lse_s)``.
    """
    check_sequence("outs", outs, min_len=1, note="one partial output per key set")
    check_sequence("lses", lses, length=len(outs), note="one log-sum-exp per output")
    lse = torch.stack(lses)  # (S, ..., Tq)
    total = torch.logsumexp(lse, dim=0)  # (..., Tq)
    total_safe = torch.where(torch.isinf(total), torch.zeros_like(total), total)
    weights = torch.exp(lse - total_safe)  # (S, ..., Tq); a part that saw no key weighs 0
    acc = torch.promote_types(outs[0].dtype, torch.float32)
    return (weights[..., None] * torch.stack([o.to(acc) for o in outs])).sum(dim=0).to(outs[0].dtype)


def split_k_decode(q, k, v, *, n_splits: int = 4, key_mask=None, scale: float | None = None) -> torch.Tensor:
    """FlashDecoding (Dao, Haziza, Massa & Sizov 2023): attention of a few new queries over a long cache, with the
    keys split into ``n_splits`` chunks computed independently (on a GPU: in parallel, one per block of threads)
    and merged by their log-sum-exp (``merge_partials``). ``q: (B, H, Tq, D)`` with ``Tq`` small (usually 1);
    the queries are the last ``Tq`` positions and see every cached key (no future keys exist).
    """
    check_int("n_splits", n_splits, min=1)
    _check_inputs(q, k, v, key_mask, 1, 1)
    t_k = k.shape[2]  # >= 1: _check_inputs refuses a k without keys
    chunk = -(-t_k // n_splits)
    outs, lses = [], []
    for j0 in range(0, t_k, chunk):
        part_mask = None if key_mask is None else key_mask[:, j0 : j0 + chunk]
        o, lse = attention_with_lse(
            q,
            k[:, :, j0 : j0 + chunk],
            v[:, :, j0 : j0 + chunk],
            key_mask=part_mask,
            block_q=q.shape[2] or 1,
            block_k=chunk,
            scale=scale,
        )
        outs.append(o)
        lses.append(lse)
    return merge_partials(outs, lses)


class FlashAttentionFunction(torch.autograd.Function):
    """Tiled attention whose backward recomputes the scores tile by tile from Q, K and the saved log-sum-exp
    (Dao et al. 2022, Algorithm 4; the FlashAttention-2 loop order), so that neither pass keeps a T x T matrix.

    ``FlashAttentionFunction.apply(q, k, v, causal, key_mask, block_q, block_k, scale)`` -> ``(B, H, Tq, Dv)``
    (``autograd.Function.apply`` takes its arguments by position; ``scale`` None means ``1/sqrt(D)``).
    """

    @staticmethod
    def forward(ctx, q, k, v, causal=False, key_mask=None, block_q=64, block_k=64, scale=None):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        out, lse = attention_with_lse(
            q, k, v, causal=causal, key_mask=key_mask, block_q=block_q, block_k=block_k, scale=scale
        )
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (causal, key_mask, block_q, block_k, scale)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        causal, key_mask, block_q, block_k, scale = ctx.settings
        t_q, t_k = q.shape[2], k.shape[2]
        acc = torch.promote_types(q.dtype, torch.float32)
        qf, kf, vf, dof = q.to(acc), k.to(acc), v.to(acc), d_out.to(acc)
        dq, dk, dv = torch.zeros_like(qf), torch.zeros_like(kf), torch.zeros_like(vf)
        delta = (dof * out.to(acc)).sum(-1)  # (B, H, Tq): rowsum(dO * O), the softmax's correction term
        lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        for i0 in range(0, t_q, block_q):
            i1 = min(i0 + block_q, t_q)
            for j0 in _visible_tiles(i0, i1, t_q, t_k, block_k, causal):
                j1 = min(j0 + block_k, t_k)
                s = qf[:, :, i0:i1] @ kf[:, :, j0:j1].transpose(-1, -2) * scale  # recomputed, never stored
                p = torch.exp(s - lse_safe[:, :, i0:i1, None])  # (B, H, bq, bk): the weights, recomputed
                allowed = tile_mask(i0, i1, j0, j1, t_q, t_k, causal, key_mask, q.device)
                if allowed is not None:
                    p = p.masked_fill(~allowed, 0.0)
                p = p.masked_fill(torch.isinf(lse[:, :, i0:i1, None]), 0.0)
                dv[:, :, j0:j1] += p.transpose(-1, -2) @ dof[:, :, i0:i1]
                dp = dof[:, :, i0:i1] @ vf[:, :, j0:j1].transpose(-1, -2)
                ds = p * (dp - delta[:, :, i0:i1, None]) * scale
                dq[:, :, i0:i1] += ds @ kf[:, :, j0:j1]
                dk[:, :, j0:j1] += ds.transpose(-1, -2) @ qf[:, :, i0:i1]
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None


def trace_one_query_block(q, k, v, *, block_k: int, causal: bool = False, scale: float | None = None) -> list[dict]:
    """The online softmax of one block of queries, step by step: ``q: (bq, D)``, ``k: (Tk, D)``, ``v: (Tk, Dv)``.

    Returns one dict per key tile with ``j0``, ``j1``, the tile's ``scores`` and the running ``m``, ``l`` and
    normalised output ``o / l`` after folding it in (lists of floats), for figures and the live widget's tests.
    The queries are taken as the last ``bq`` positions when ``causal``.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    bq, t_k = q.shape[0], k.shape[0]
    m = torch.full((bq,), -math.inf, dtype=torch.float64)
    row_sum = torch.zeros(bq, dtype=torch.float64)
    o = torch.zeros(bq, v.shape[-1], dtype=torch.float64)
    steps = []
    for j0 in range(0, t_k, block_k):
        j1 = min(j0 + block_k, t_k)
        s = q.double() @ k[j0:j1].double().T * scale  # (bq, bk)
        if causal:
            s = s.masked_fill(~tile_mask(0, bq, j0, j1, bq, t_k, True, None, q.device)[0, 0], -math.inf)
        m, row_sum, o = online_softmax_step(m, row_sum, o, s, v[j0:j1].double())
        steps.append(
            {
                "j0": j0,
                "j1": j1,
                "scores": s.tolist(),
                "m": m.tolist(),
                "l": row_sum.tolist(),
                "out": torch.where(row_sum[:, None] > 0, o / row_sum.clamp_min(1e-300)[:, None], 0.0).tolist(),
            }
        )
    return steps


def materialised_attention(q, k, v, *, causal: bool = False, key_mask=None) -> torch.Tensor:
    """The standard path, written out: scores ``(B, H, Tq, Tk)`` in memory, softmax, then ``P V``."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk): the T x T matrix
    allowed = tile_mask(0, q.shape[2], 0, k.shape[2], q.shape[2], k.shape[2], causal, key_mask, q.device)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    return torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0) @ v


# ----------------------------------------------------------------------------- IO: the paper's count of HBM traffic
def hbm_elements_standard(t_q: int, t_k: int, d: int) -> int:
    """Elements standard attention moves between HBM and the chip (Dao et al. 2022, Algorithm 0): read Q, K and
    write S; read S, write P; read P and V, write O. ``= 2 Tq Tk`` reads + ``2 Tq Tk`` writes of the scores,
    plus the inputs and the output."""
    return (t_q * d + t_k * d + t_q * t_k) + (2 * t_q * t_k) + (t_q * t_k + t_k * d + t_q * d)


def flash_block_sizes(sram_elements: int, d: int) -> tuple[int, int]:
    """The paper's tile sizes for ``M`` elements of SRAM: ``B_c = ceil(M / 4d)`` keys, ``B_r = min(B_c, d)``
    queries (Dao et al. 2022, Algorithm 1, line 1)."""
    b_c = -(-sram_elements // (4 * d))
    return min(b_c, d), b_c


def hbm_elements_flash(t_q: int, t_k: int, d: int, sram_elements: int) -> int:
    """Elements FlashAttention (Algorithm 1) moves: K and V once; for each of the ``T_c = ceil(Tk / B_c)`` key blocks
    it reads and writes every query block's ``O``, ``l``, ``m`` and reads its ``Q``; plus writing the initial
    ``O``, ``l``, ``m``. Theorem 2: ``Theta(Tq Tk d^2 / M)``."""
    _, b_c = flash_block_sizes(sram_elements, d)
    t_c = -(-t_k // b_c)
    per_key_block = (2 * t_q * d + 2 * t_q) + (t_q * d + 2 * t_q)  # read Q_i, O_i, l_i, m_i; write O_i, l_i, m_i
    return 2 * t_k * d + t_c * per_key_block + (t_q * d + 2 * t_q)


def hbm_elements_flash2(t_q: int, t_k: int, d: int, block_q: int) -> int:
    """Elements the FlashAttention-2 loop order (this module's, and the Triton kernel's) moves: each query block
    reads its Q once and every K, V block once, and writes O and the log-sum-exp once: ``2 Tk d ceil(Tq / B_r)``
    plus ``2 Tq d + Tq``."""
    return 2 * t_k * d * -(-t_q // block_q) + 2 * t_q * d + t_q

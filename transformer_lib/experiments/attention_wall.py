"""Chapter 10's measurements: what the T x T score matrix costs (time, memory) and where one block's time goes.

Used in chapter 10.

``wall_table`` times attention that writes out its scores (``flash.materialised_attention``), the library's tiled
loop (``flash.tiled_attention``) and PyTorch's fused ``F.scaled_dot_product_attention`` on one head, round-robin
(``timing.interleaved_times``), and counts each one's peak tensor bytes (``tensor_memory.PeakTensorBytes``).
``block_shares`` times one GPT-2-small-width block's attention core against its projections (QKV, output, MLP).
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

from ..blocks.flash import materialised_attention, tiled_attention
from ..book_tools.tensor_memory import peak_tensor_bytes
from ..book_tools.timing import interleaved_times


def wall_table(lengths, d_head: int = 64, repeats: int = 3, block: int = 512, seed: int = 0) -> list[dict]:
    """One row per ``T``: FLOPs ``4 T^2 d`` and score bytes ``4 T^2`` (closed forms), every round's seconds and
    the peak tensor bytes of the materialising, tiled and fused paths on ``q, k, v: (1, 1, T, d_head)`` fp32."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i, T in enumerate(lengths):
        q, k, v = (torch.randn(1, 1, T, d_head, generator=g) for _ in range(3))
        fns = {
            "materialised": lambda: materialised_attention(q, k, v),
            "tiled": lambda: tiled_attention(q, k, v, block_q=block, block_k=block),
            "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        }
        peaks = {name: peak_tensor_bytes(fn) for name, fn in fns.items()}  # first: this run warms each path at T
        # a warm-up round only at the first length (first calls); later lengths are warmed by the peak runs above
        times = interleaved_times(fns, repeats=repeats, warmup=1 if i == 0 else 0)
        rows.append(
            {"T": T, "flops": 4 * T * T * d_head, "score_bytes": 4 * T * T, "times": times, "peak_bytes": peaks}
        )
    return rows


def block_weights(d_model: int = 768, d_ff: int = 3072, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights of one GPT block's four matrices, ``x W`` convention: qkv (d, 3d), out (d, d), up, down."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"qkv": (d_model, 3 * d_model), "out": (d_model, d_model), "up": (d_model, d_ff), "down": (d_ff, d_model)}
    return {name: torch.randn(*shape, generator=g) / shape[0] ** 0.5 for name, shape in shapes.items()}


def projections(x: torch.Tensor, w: dict, n_heads: int):
    """The block's matrix products outside attention; returns ``(q, k, v)`` as ``(1, H, T, d_head)`` too."""
    T, d = x.shape[-2], x.shape[-1]
    q, k, v = (x @ w["qkv"]).split(d, dim=-1)  # (1, T, d) each
    _ = x @ w["out"]  # the output projection's product (its input would be attention's output: same cost)
    _ = F.gelu(x @ w["up"]) @ w["down"]
    return tuple(t.view(1, T, n_heads, d // n_heads).transpose(1, 2) for t in (q, k, v))


def block_shares(
    lengths, d_model: int = 768, n_heads: int = 12, d_ff: int = 3072, repeats: int = 5, seed: int = 0
) -> list[dict]:
    """One row per ``T``: seconds per round of the projections and of causal materialising attention (all heads),
    interleaved, the measured attention share (median over rounds) and the FLOP share ``4 T d / (4 T d + 2 P)``
    with ``P = 3d^2 + d^2 + 2 d d_ff`` multiply-adds per position."""
    w = block_weights(d_model, d_ff, seed)
    g = torch.Generator().manual_seed(seed + 1)
    P = 4 * d_model * d_model + 2 * d_model * d_ff
    rows = []
    for i, T in enumerate(lengths):
        x = torch.randn(1, T, d_model, generator=g)
        q, k, v = projections(x, w, n_heads)  # also the projections' warm-up at this T
        if i == 0:  # attention's first call; at the later lengths its T x T buffers (over 32 MB from T = 1024 at
            materialised_attention(q, k, v, causal=True)  # 12 heads) are fresh pages from the OS in every call
        times = interleaved_times(
            {
                "projections": lambda: projections(x, w, n_heads),
                "attention": lambda: materialised_attention(q, k, v, causal=True),
            },
            repeats=repeats,
            warmup=0,
        )
        shares = [a / (a + p) for a, p in zip(times["attention"], times["projections"])]
        rows.append(
            {
                "T": T,
                "times": times,
                "share": statistics.median(shares),
                "shares": shares,
                "flop_share": 4 * T * d_model / (4 * T * d_model + 2 * P),
            }
        )
    return rows

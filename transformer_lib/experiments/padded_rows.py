"""Chapter 06's padded-rows experiment: padded positions as queries (harvardnlp/annotated-transformer#137). A
padded batch through a few layers of residual self-attention, with the padding mask on keys only or on keys and
queries, filled with ``-inf``, ``finfo.min`` or the library's boolean mask.

Used in chapter 06.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..blocks.attention import scaled_dot_product_attention
from .mask_fill import apply_fill


@dataclass
class PaddedRowsResult:
    variant: str
    nan_rows_layer0: int  # padded query rows that became NaN after the first layer (layer 0)
    nan_real_outputs: bool  # did NaN reach a real (non-padded) position after the last layer?
    loss: float  # cross-entropy over real positions only (ignore_index on the padding)
    nan_grad: bool
    real_diff: float  # max |output - output of the same sequence run alone, unpadded| over real positions


def _naive_attention(q, k, v, keep, fill):
    """Teaching-only attention with a fill value (the pitfall): ``q, k, v: (B, T, d)``, ``keep: (B, T, T)``."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, T, T)
    return torch.softmax(apply_fill(scores, keep, fill, "replace"), dim=-1) @ v


def padded_rows_experiment(
    lengths=(6, 4), d: int = 16, vocab: int = 11, n_layers: int = 2, seed: int = 0
) -> list[PaddedRowsResult]:
    """A padded batch through ``n_layers`` of residual self-attention ``h = h + attn(h)`` and a linear read-out.

    Variants: the padding mask on keys only (the Annotated Transformer's ``src_mask``; library path); keys and
    queries both masked (the change proposed in harvardnlp/annotated-transformer#137) with ``-inf``, with
    ``finfo.min``, and through the library (boolean mask, fully masked rows give 0).
    """
    gen = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    lengths_t = torch.tensor(lengths)
    real = torch.arange(T)[None, :] < lengths_t[:, None]  # (B, T) True on real tokens
    x0 = torch.randn(B, T, d, generator=gen)
    w_qkv = torch.randn(3, d, d, generator=gen) / math.sqrt(d)
    w_out = torch.randn(d, vocab, generator=gen) / math.sqrt(d)
    targets = torch.randint(0, vocab, (B, T), generator=gen).masked_fill(~real, -100)
    keys_only = real[:, None, :].expand(B, T, T)  # (B, Tq, Tk): every query sees the real keys
    both = keys_only & real[:, :, None]  # padded queries see nothing

    def forward(x, keep, fill, w):
        h, first = x, None
        for _ in range(n_layers):
            q, k, v = (h @ w[i] for i in range(3))
            a = scaled_dot_product_attention(q, k, v, keep) if fill is None else _naive_attention(q, k, v, keep, fill)
            h = h + a
            first = h if first is None else first
        return h, first

    variants = [
        ("keys only (library)", keys_only, None),
        ("keys + queries, -inf", both, "-inf"),
        ("keys + queries, finfo.min", both, "finfo.min"),
        ("keys + queries (library)", both, None),
    ]
    results = []
    for name, keep, fill in variants:
        w = w_qkv.clone().requires_grad_(True)
        h, first = forward(x0, keep, fill, w)
        loss = F.cross_entropy((h @ w_out).flatten(0, 1), targets.flatten(), ignore_index=-100)
        loss.backward()
        with torch.no_grad():  # each sequence alone, without padding
            diffs = []
            for b, n in enumerate(lengths):
                alone, _ = forward(x0[b : b + 1, :n], torch.ones(1, n, n, dtype=torch.bool), fill, w)
                diffs.append((alone[0] - h[b, :n]).abs().max())
            diff = torch.stack(diffs).max().item()
        results.append(
            PaddedRowsResult(
                name,
                int(torch.isnan(first).any(-1)[~real].sum()),
                bool(torch.isnan(h[real]).any()),
                loss.item(),
                bool(torch.isnan(w.grad).any()),
                diff,
            )
        )
    return results

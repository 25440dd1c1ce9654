"""Statistics of attention maps (and of any distribution): the one place the book computes them.

Used in chapters 02 and 03.

``entropy_bits`` is the entropy of any distribution (an attention row, a next-token distribution); the
rest are per-head statistics of attention maps: a few numbers that say what pattern a head draws.

Clark et al. 2019 ("What Does BERT Look At? An Analysis of BERT's Attention") measured BERT's heads
this way and found heads that attend to the previous or the next token, heads that spread their
attention broadly, and heads that put most of it on ``[SEP]``. These functions compute such numbers
for any stack of maps, e.g. ``pretrained.attention_maps``' ``(n_layers, n_heads, T, T)``.

All functions take ``attentions: (..., T, T)`` for **one unpadded sentence**: row ``i`` is how
query ``i`` spreads its weight over the ``T`` keys (non-negative, sums to 1). With
``skip_special=True`` the first and last positions are taken to be ``[CLS]`` and ``[SEP]`` (BERT's
layout): only the word pieces ``1 .. T-2`` count as queries, and as neighbours for ``previous``/``next``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..utils.checks import check_empty, check_equal, check_int, check_number, check_sequence, check_tensor

STATISTICS = ("entropy", "entropy_ratio", "previous", "next", "self", "cls", "sep", "distance")
"""The keys of ``head_statistics``' result, in order."""

PATTERN_LABELS = {"previous": "previous token", "next": "next token", "self": "itself", "cls": "[CLS]", "sep": "[SEP]"}
"""Statistic name -> label used by ``dominant_pattern`` when that statistic holds most of the weight."""


def check_attention_maps(attentions: torch.Tensor, name: str = "attentions", min_len: int = 1) -> None:
    """Raise unless ``attentions`` is a float ``(..., T, T)`` stack of attention maps with ``T >= min_len`` whose
    rows are finite, non-negative and sum to 1 (``TypeError`` for a non-tensor, ``ValueError`` for the rest)."""
    check_tensor(name, attentions, (..., "T", "T"), floating=True, min=0, finite=True, note="square attention maps")
    check_int(f"{name}.shape[-1]", attentions.shape[-1], min=min_len, note="positions T")
    tol = 1e-3 if attentions.dtype in (torch.float32, torch.float64) else 3e-2
    worst = (attentions.float().sum(-1) - 1).abs().max().item()
    check_number(f"the worst |row sum - 1| of {name}", worst, max=tol, note="each row must sum to 1")


def _queries(T: int, skip_special: bool) -> torch.Tensor:
    """The query positions that count: ``1 .. T-2`` (word pieces) or ``0 .. T-1``."""
    return torch.arange(1, T - 1) if skip_special else torch.arange(T)


def _min_len(skip_special: bool) -> int:
    return 3 if skip_special else 1  # [CLS] w [SEP] is the shortest sentence with a word piece


def entropy_bits(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in **bits** of each distribution along ``dim``: ``-sum p log2 p`` (``0 log 0 = 0``).

    ``p: (..., n)`` -> ``(...)`` float32 (for ``dim=-1``). 0 bits: all mass on one outcome (one-hot);
    ``log2(n)`` bits: uniform over ``n`` outcomes. ``p`` is not checked to sum to 1 (``row_entropy`` checks maps).
    """
    check_tensor("p", p, floating=True, note="probabilities")
    p = p.float()
    return 0.0 - torch.special.xlogy(p, p).sum(dim) / math.log(2.0)  # 0.0 - s: a one-hot row gives 0, not -0


def row_entropy(attentions: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in **bits** of every row, ``-sum_j p_j log2 p_j`` (``0 log 0 = 0``): ``(..., T)``.

    0 bits: all weight on one key; ``log2(T)`` bits: spread evenly over the ``T`` keys.
    """
    check_attention_maps(attentions)
    return entropy_bits(attentions)  # (..., T)


def offset_weight(attentions: torch.Tensor, offset: int, skip_special: bool = False) -> torch.Tensor:
    """Mean weight a query puts on the key ``offset`` places away: ``(...)``.

    ``offset=-1``: the previous token; ``+1``: the next one; ``0``: itself. Averaged over the queries
    ``i`` whose key ``i + offset`` exists (and, with ``skip_special``, both are word pieces).
    A head that always attends to the previous token scores 1.
    """
    check_attention_maps(attentions, min_len=_min_len(skip_special))
    T = attentions.shape[-1]
    lo, hi = (1, T - 2) if skip_special else (0, T - 1)
    n = hi - lo + 1  # the positions that count
    check_int("offset", offset, min=1 - n, max=n - 1, note=f"a key that far away among {n} positions, T={T}")
    q = _queries(T, skip_special)
    q = q[(q + offset >= lo) & (q + offset <= hi)]  # the queries whose key i + offset exists
    return attentions.float()[..., q, q + offset].mean(-1)  # (...)


def key_weight(attentions: torch.Tensor, key: int, skip_special: bool = False) -> torch.Tensor:
    """Mean weight the queries put on one key position (``0``: ``[CLS]``, ``-1``: ``[SEP]``): ``(...)``."""
    check_attention_maps(attentions, min_len=_min_len(skip_special))
    T = attentions.shape[-1]
    check_int("key", key, min=-T, max=T - 1, note=f"a key position, T={T}")
    q = _queries(T, skip_special)
    return attentions.float()[..., q, key % T].mean(-1)  # (...)


def mean_distance(attentions: torch.Tensor, skip_special: bool = False) -> torch.Tensor:
    """Mean attention distance in positions, ``mean_i sum_j p_ij |i - j|``: ``(...)``.

    0 for a head that attends to itself, 1 for previous/next-token heads, and
    ``(T^2 - 1) / (3 T)`` for uniform attention over all ``T`` positions.
    """
    check_attention_maps(attentions, min_len=_min_len(skip_special))
    T = attentions.shape[-1]
    pos = torch.arange(T, device=attentions.device)
    dist = (pos[:, None] - pos[None, :]).abs().float()  # (T, T): |i - j|
    per_query = (attentions.float() * dist).sum(-1)  # (..., T)
    return per_query[..., _queries(T, skip_special).to(attentions.device)].mean(-1)  # (...)


def head_statistics(attentions: torch.Tensor, skip_special: bool = True) -> dict[str, torch.Tensor]:
    """Every statistic of ``STATISTICS`` for every map: a dict of float32 CPU tensors, each shaped
    like ``attentions.shape[:-2]`` (e.g. ``(n_layers, n_heads)``).

    * ``entropy``: mean row entropy in bits; ``entropy_ratio``: the same over ``log2(T)`` (1 = uniform);
    * ``previous`` / ``next`` / ``self``: mean weight on the key one before / one after / the query itself;
    * ``cls`` / ``sep``: mean weight on the first / last position (``[CLS]`` / ``[SEP]`` in BERT);
    * ``distance``: mean attention distance in positions.

    With ``skip_special`` (default), only word-piece queries ``1 .. T-2`` are averaged (see the module doc).
    Needs ``T >= 4`` with ``skip_special`` (two word pieces), else ``T >= 2``.
    """
    check_attention_maps(attentions, min_len=4 if skip_special else 2)  # room for a previous and a next token
    T = attentions.shape[-1]
    q = _queries(T, skip_special).to(attentions.device)
    entropy = row_entropy(attentions)[..., q].mean(-1)
    stats = {
        "entropy": entropy,
        "entropy_ratio": entropy / math.log2(T),
        "previous": offset_weight(attentions, -1, skip_special),
        "next": offset_weight(attentions, +1, skip_special),
        "self": offset_weight(attentions, 0, skip_special),
        "cls": key_weight(attentions, 0, skip_special),
        "sep": key_weight(attentions, -1, skip_special),
        "distance": mean_distance(attentions, skip_special),
    }
    return {k: v.cpu() for k, v in stats.items()}


def head_statistics_over(maps: Sequence[torch.Tensor], skip_special: bool = True) -> dict[str, torch.Tensor]:
    """``head_statistics`` of several sentences' maps (each ``(..., T_n, T_n)``, lengths may differ),
    stacked: each value is ``(N, ...)`` for ``N`` sentences."""
    check_sequence("maps", maps, min_len=1, note="one (..., T, T) tensor per sentence")
    per = [head_statistics(m, skip_special) for m in maps]
    lead = tuple(per[0]["entropy"].shape)  # e.g. (n_layers, n_heads)
    for i, p in enumerate(per):
        check_equal(f"maps[{i}].shape[:-2]", tuple(p["entropy"].shape), lead, note="the same leading shape as maps[0]")
    return {k: torch.stack([p[k] for p in per]) for k in STATISTICS}


def dominant_pattern(stats: dict[str, torch.Tensor], threshold: float = 0.5, broad_ratio: float = 0.8):
    """A one-word description of each head from its statistics (nested lists of str shaped like the stats).

    The label of ``PATTERN_LABELS`` whose statistic is largest, if it holds at least ``threshold`` of the
    weight; else ``"broad"`` if ``entropy_ratio >= broad_ratio``; else ``"mixed"``. A crude summary: the
    thresholds are choices, not facts about the model.
    """
    check_number("threshold", threshold, min=0, max=1, min_open=True, note="share of the weight")
    check_number("broad_ratio", broad_ratio, min=0, max=1, min_open=True, note="entropy over its maximum")
    missing = [k for k in (*PATTERN_LABELS, "entropy_ratio") if k not in stats]
    check_empty("stats' missing keys", missing, note="pass the dict returned by head_statistics")
    names = list(PATTERN_LABELS)
    values = torch.stack([stats[k].float() for k in names], -1)  # (..., 5)
    best, which = values.max(-1)

    def label(b, w, r):
        if isinstance(b, list):
            return [label(*args) for args in zip(b, w, r)]
        if b >= threshold:
            return PATTERN_LABELS[names[w]]
        return "broad" if r >= broad_ratio else "mixed"

    return label(best.tolist(), which.tolist(), stats["entropy_ratio"].float().tolist())

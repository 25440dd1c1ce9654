"""Chapter 10's figures: the wall (time and memory against T) and the online softmax sweeping one query block.

Used in chapter 10.
"""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
import numpy as np

LABELS = {
    "materialised": "scores written out (T x T)",
    "tiled": "tiled, online softmax (this library, Python loop)",
    "sdpa": "F.scaled_dot_product_attention (fused)",
}


def plot_wall(rows):
    """Two panels from ``experiments.attention_wall.wall_table`` rows: median seconds (with the range over rounds)
    and peak tensor MB against ``T``, log-log, with the closed forms ``4 T^2 d`` FLOPs and ``4 T^2`` score bytes."""
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 3.8))
    ts = [r["T"] for r in rows]
    for name, label in LABELS.items():
        med = [statistics.median(r["times"][name]) * 1e3 for r in rows]
        lo = [med[i] - min(r["times"][name]) * 1e3 for i, r in enumerate(rows)]
        hi = [max(r["times"][name]) * 1e3 - med[i] for i, r in enumerate(rows)]
        ax_t.errorbar(ts, med, yerr=[lo, hi], marker="o", capsize=3, label=label)
        ax_m.plot(ts, [r["peak_bytes"][name] / 1e6 for r in rows], marker="o", label=label)
    ax_m.plot(ts, [r["score_bytes"] / 1e6 for r in rows], "k--", label="closed form: one T x T fp32 matrix, 4 T^2")
    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
    ax_t.set_ylabel("ms per call (median, range over rounds)")
    ax_t.set_title("Time of one attention head (d = 64, fp32)")
    ax_m.set_ylabel("peak tensor memory (MB)")
    ax_m.set_title("Peak memory of the same calls")
    ax_m.legend(fontsize=7)
    ax_t.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_online_softmax(steps, query: int = 0):
    """The tiles of one query block's score row, step by step (``flash.trace_one_query_block``): top, the scores
    of ``query`` with the tiles seen so far; bottom, its running maximum ``m`` and sum ``l`` after each tile."""
    scores = np.concatenate([np.asarray(s["scores"])[query] for s in steps])
    fig, (ax_s, ax_r) = plt.subplots(2, 1, figsize=(8, 4.6), gridspec_kw={"height_ratios": [3, 2]})
    finite = np.isfinite(scores)
    ax_s.bar(np.arange(len(scores))[finite], scores[finite], color="lightgray", label="score q k^T / sqrt(d)")
    for i, s in enumerate(steps):
        ax_s.axvspan(s["j0"] - 0.5, s["j1"] - 0.5, alpha=0.12, color=f"C{i % 10}")
        ax_s.hlines(s["m"][query], s["j0"] - 0.5, s["j1"] - 0.5, colors=f"C{i % 10}", linewidth=2)
    ax_s.set_xlabel("key position (shaded: one tile each; line: running max m after that tile)")
    ax_s.set_ylabel("score")
    ax_s.set_title(f"Online softmax over {len(steps)} tiles, query {query} of the block")
    x = np.arange(1, len(steps) + 1)
    ax_r.plot(x, [s["m"][query] for s in steps], "o-", label="running max m")
    ax_r.plot(x, [s["l"][query] for s in steps], "s-", label="running sum l = sum exp(s - m)")
    ax_r.set_xlabel("tiles folded in")
    ax_r.set_ylabel("value")
    ax_r.set_xticks(x)
    ax_r.legend(fontsize=8)
    fig.tight_layout()
    return fig

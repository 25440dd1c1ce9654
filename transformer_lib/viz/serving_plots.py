"""Chapter 07's batching figure: decoding throughput and arithmetic intensity against the batch size.

Used in chapter 07.

``plot_batching_roofline`` reads the rows of ``experiments.batched_decoding.decode_throughput`` (``batch``,
``tok_per_s``, ``intensity``) and the machine's balance point (measured FLOP/s over measured bytes/s): left, the
measured tokens per second (with the range over the timed rounds when the rows carry ``decode_times``) beside the
line a purely bytes-bound step would give (the batch of one's speed times
the batch); right, the step's FLOPs per byte with the balance point drawn across.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..utils.checks import check_empty, check_number, check_sequence


def plot_batching_roofline(rows: list[dict], balance: float, title: str = "Batched decoding"):
    """Two panels against the batch size (log scale): measured tok/s with the bytes-bound line ``B x tok/s(1)``,
    and the arithmetic intensity with a horizontal line at ``balance`` (FLOPs per byte). Returns the figure."""
    check_sequence("rows", rows, min_len=1, items=dict, note="decode_throughput's dicts, one per batch size")
    for i, r in enumerate(rows):
        missing = {"batch", "tok_per_s", "intensity"} - set(r)
        check_empty(f"rows[{i}]'s missing keys", missing, note="each row has batch, tok_per_s and intensity")
    check_number("balance", balance, min=0, min_open=True, note="the machine's FLOPs per byte")
    batch = [r["batch"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.2))
    measured = [r["tok_per_s"] for r in rows]
    ax1.plot(batch, measured, "o-", label="measured (median)")
    ax1.plot(
        batch,
        [rows[0]["tok_per_s"] * b / rows[0]["batch"] for b in batch],
        "--",
        color="gray",
        label="bytes-bound: B x batch-1 speed",
    )
    if all("decode_times" in r for r in rows):  # every round's seconds: the range of tok/s they give
        tokens = [r["tok_per_s"] * r["decode_seconds"] for r in rows]  # tokens per timed call
        low = [m - n / max(r["decode_times"]) for m, n, r in zip(measured, tokens, rows)]
        high = [n / min(r["decode_times"]) - m for m, n, r in zip(measured, tokens, rows)]
        ax1.errorbar(
            batch, measured, yerr=[low, high], fmt="none", ecolor="C0", capsize=3, label="range over the timed rounds"
        )
    ax1.set_ylabel("tokens per second (all rows)")
    ax1.set_title(title)
    ax2.plot(batch, [r["intensity"] for r in rows], "s-", color="C1", label="decoding step")
    ax2.axhline(balance, color="C3", linestyle=":", label=f"machine balance {balance:.1f} FLOP/B")
    ax2.set_ylabel("FLOPs per byte moved")
    ax2.set_title("Arithmetic intensity of one step")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(batch, [str(b) for b in batch])
        ax.set_xlabel("batch size B")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig

"""Chapter 01's figures: a recurrent loop against attention, measured (``plot_step_times``) and drawn side by
side (``draw_rnn_vs_attention``). The numbers come from ``experiments.training_step_cost`` and
``experiments.sequence_cost``.

Used in chapter 01.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from ..book_tools.timing import interval_coverage, median_interval

STYLE = {"RNN (Python loop)": "tab:red", "nn.LSTM (C++ loop)": "tab:orange", "attention": "tab:blue"}


def plot_step_times(
    lengths: Sequence[int],
    times: dict[tuple[str, str], list[float]],
    flops: dict[str, list[float]],
    what: str = "forward pass",
    rounds: dict[tuple[str, str], list[list[float]]] | None = None,
):
    """Left: the time of one ``what`` (a forward pass, a training step) against T (log-log); right: the arithmetic
    rate reached (FLOPs / time).

    ``times: {(model name, device type): [seconds per length]}``; ``flops: {model name: [FLOPs per length]}``.
    Model names are the keys of ``STYLE``; CPU lines are solid, GPU lines dashed. With ``rounds`` (the same keys,
    every round's seconds per length) each time gets the bar of the median's interval (``timing``'s ranks).
    """
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(10, 4))
    coverage = None
    for (name, dev), ts in times.items():
        ls = "-" if dev == "cpu" else "--"
        ms = [t * 1e3 for t in ts]
        ax_t.loglog(lengths, ms, ls, marker="o", ms=3, color=STYLE[name], label=f"{name}, {dev}")
        if rounds is not None:
            bounds = [median_interval(r) for r in rounds[name, dev]]  # (low, high) seconds, per length
            coverage = interval_coverage(len(rounds[name, dev][0]))
            yerr = [
                [m - low * 1e3 for m, (low, _) in zip(ms, bounds)],
                [high * 1e3 - m for m, (_, high) in zip(ms, bounds)],
            ]
            ax_t.errorbar(lengths, ms, yerr=yerr, fmt="none", ecolor=STYLE[name], capsize=2)
        ax_r.semilogx(
            lengths,
            [f / t / 1e9 for f, t in zip(flops[name], ts)],
            ls,
            marker="o",
            ms=3,
            color=STYLE[name],
            label=f"{name}, {dev}",
        )
    interval = "" if coverage is None else f"\n(median, {coverage:.1%} interval)"
    ax_t.set(xlabel="sequence length T", ylabel=f"time of one {what} (ms){interval}", title=f"Time of one {what}")
    ax_r.set(xlabel="sequence length T", ylabel="GFLOP/s reached", title="Arithmetic rate (FLOPs / time)")
    ax_r.set_ylim(bottom=0)
    for ax in (ax_t, ax_r):
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=9)
    plt.tight_layout()
    return fig


def draw_rnn_vs_attention(
    T: int,
    lengths: Sequence[int],
    times: dict[tuple[str, str], list[float]],
    what: str = "forward pass",
    rounds: dict[tuple[str, str], list[list[float]]] | None = None,
):
    """Left: an RNN's ``T`` dependent steps; middle: attention's one step; right: the times measured at ``T``
    (``times`` as in ``plot_step_times``, ``T`` one of ``lengths``; ``what`` they time). The chain is drawn
    as its first three steps, "...", and step T. ``rounds`` (same keys, per length every timed round's seconds,
    as ``training_step_rounds`` returns them): whiskers from the fastest to the slowest round, quoted in the
    caption. Returns ``(figure, HTML caption)``."""
    fig, (ax_r, ax_a, ax_b) = plt.subplots(1, 3, figsize=(9.5, 2.6), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    shown = list(range(1, T + 1)) if T <= 5 else [1, 2, 3, None, T]  # None: the steps left out
    cmap = plt.get_cmap("viridis")
    for i, t in enumerate(shown):  # left: a chain of hidden states
        if t is None:
            ax_r.text(i, 1, "...", ha="center", va="center", fontsize=14)
            continue
        colour = cmap(0.1 + 0.5 * (t - 1) / max(T - 1, 1))  # later steps lighter; all dark enough for white text
        size = 11 if t < 100 else 8  # room for a four-digit index
        ax_r.add_patch(FancyBboxPatch((i - 0.34, 0.8), 0.68, 0.4, boxstyle="round,pad=0.03", fc=colour, ec="k"))
        ax_r.text(i, 1, f"$h_{{{t}}}$", ha="center", va="center", color="w", fontsize=size)
        ax_r.text(i, 0.05, f"$x_{{{t}}}$", ha="center", va="center", fontsize=size)
        ax_r.text(i, 1.45, f"step {t}", ha="center", fontsize=9)
        ax_r.add_patch(FancyArrowPatch((i, 0.2), (i, 0.75), arrowstyle="-|>", mutation_scale=10))
        if i > 0:
            ax_r.add_patch(FancyArrowPatch((i - 0.63, 1), (i - 0.36, 1), arrowstyle="-|>", mutation_scale=10))
    ax_r.set(xlim=(-0.6, len(shown) - 0.4), ylim=(-0.2, 1.7), title=f"RNN: {T} steps, one after another")
    positions = list(range(len(shown)))  # middle: every input to every output
    for i in positions:
        for j in positions:
            if shown[i] is not None and shown[j] is not None:
                ax_a.plot([i, j], [0.2, 0.8], color="tab:blue", alpha=0.35, lw=1)
    for i, t in enumerate(shown):
        label = "..." if t is None else f"$x_{{{t}}}$"
        ax_a.text(i, 0.05, label, ha="center", va="center", fontsize=11)
        ax_a.text(i, 1.0, "..." if t is None else f"$y_{{{t}}}$", ha="center", va="center", fontsize=11)
    ax_a.text((len(shown) - 1) / 2, 1.45, "step 1 (all at once)", ha="center", fontsize=9)
    ax_a.set(xlim=(-0.6, len(shown) - 0.4), ylim=(-0.2, 1.7), title=f"Attention: all {T} positions in 1 step")
    for ax in (ax_r, ax_a):
        ax.axis("off")
    i = list(lengths).index(T)  # right: the measured times
    names = [(name, dev) for name, dev in times]
    values = [times[key][i] * 1e3 for key in names]
    err = None
    if rounds is not None:  # whiskers: fastest to slowest round, around the median bar
        err = [
            [v - min(rounds[key][i]) * 1e3 for key, v in zip(names, values)],
            [max(rounds[key][i]) * 1e3 - v for key, v in zip(names, values)],
        ]
    ax_b.barh(range(len(names)), values, xerr=err, capsize=3, color=[STYLE[name] for name, _ in names])
    ax_b.set_yticks(range(len(names)), [f"{name}, {dev}" for name, dev in names], fontsize=9)
    ax_b.set_xscale("log")
    every = [t for ts in times.values() for t in ts]
    if rounds is not None:
        every += [t for per_length in rounds.values() for r in per_length for t in r]
    ax_b.set_xlim(min(every) * 1e3 / 2, max(every) * 1e3 * 2)
    ax_b.invert_yaxis()
    ax_b.set(
        xlabel=f"time of one {what} (ms, log scale)"
        + ("\nmedian; whiskers: fastest-slowest round" if rounds is not None else ""),
        title=f"Measured at T = {T}",
    )
    plt.tight_layout()

    def quoted(name):
        key = (name, "cpu")
        text = f"{times[key][i] * 1e3:.2f} ms"
        if rounds is not None:
            text += f" ({min(rounds[key][i]) * 1e3:.2f}-{max(rounds[key][i]) * 1e3:.2f})"
        return text

    spread = f", median (fastest-slowest of {len(rounds[names[0]][i])} rounds)" if rounds is not None else ""
    caption = (
        f"<b>T = {T}</b>: RNN loop {quoted('RNN (Python loop)')} for {T} dependent steps; nn.LSTM "
        f"{quoted('nn.LSTM (C++ loop)')}; attention {quoted('attention')} in 1 step (one {what} on the "
        f"CPU{spread})."
    )
    return fig, caption

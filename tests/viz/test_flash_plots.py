"""Chapter 10's figures and measurements: labelled axes, the plotted values are the measured ones, and the
experiment's closed forms (FLOPs, score bytes, FLOP share) are the chapter's formulas."""

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.experiments.attention_wall import block_shares, wall_table  # noqa: E402
from transformer_lib.blocks.flash import (
    flash_block_sizes,
    hbm_elements_flash,
    hbm_elements_flash2,  # noqa: E402
    hbm_elements_standard,
    trace_one_query_block,
)
from transformer_lib.viz.flash_plots import plot_online_softmax, plot_wall  # noqa: E402


def test_wall_table_closed_forms_and_memory_plot_values():
    rows = wall_table([32, 64], d_head=8, repeats=1)
    assert [(r["flops"], r["score_bytes"]) for r in rows] == [
        (4 * 32 * 32 * 8, 4 * 32 * 32),
        (4 * 64 * 64 * 8, 4 * 64 * 64),
    ]
    assert all(len(r["times"][n]) == 1 for r in rows for n in ("materialised", "tiled", "sdpa"))
    fig = plot_wall(rows)
    ax_t, ax_m = fig.axes
    assert all(ax.get_xlabel() and ax.get_ylabel() and ax.get_title() for ax in fig.axes)
    assert list(ax_m.lines[0].get_ydata()) == pytest.approx([r["peak_bytes"]["materialised"] / 1e6 for r in rows])
    plt.close(fig)


def test_block_shares_flop_share_is_t_over_t_plus_6d():
    rows = block_shares([16, 48], d_model=32, n_heads=4, d_ff=128, repeats=1)
    assert [r["flop_share"] for r in rows] == pytest.approx([16 / (16 + 6 * 32), 48 / (48 + 6 * 32)])
    assert all(0 < r["share"] < 1 for r in rows)


def test_online_softmax_figure_draws_the_running_max_of_each_step():
    g = torch.Generator().manual_seed(0)
    steps = trace_one_query_block(
        torch.randn(2, 4, generator=g), torch.randn(10, 4, generator=g), torch.randn(10, 3, generator=g), block_k=4
    )
    fig = plot_online_softmax(steps, query=1)
    ax_s, ax_r = fig.axes
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)
    assert list(ax_r.lines[0].get_ydata()) == pytest.approx([s["m"][1] for s in steps])
    plt.close(fig)


def test_hbm_counts_follow_the_papers_formulas():
    N, d = 1024, 64
    assert hbm_elements_standard(N, N, d) == 4 * N * d + 4 * N * N  # Algorithm 0
    M = 98304
    b_r, b_c = flash_block_sizes(M, d)
    assert (b_r, b_c) == (64, 384)
    t_c = -(-N // b_c)
    assert hbm_elements_flash(N, N, d, M) == 2 * N * d + t_c * (3 * N * d + 4 * N) + N * d + 2 * N
    assert hbm_elements_flash2(N, N, d, 128) == 2 * N * d * (N // 128) + 2 * N * d + N
    # Theorem 2: quadrupling the SRAM cuts the traffic of the loop over key blocks about fourfold
    big = 8192
    assert hbm_elements_flash(big, big, d, 4 * M) < 0.4 * hbm_elements_flash(big, big, d, M)

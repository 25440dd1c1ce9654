"""Chapter figures in viz/ (rnn_plots, multihead_plots, positional_plots, tables): labelled axes, captions whose
numbers follow from closed forms."""
import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.viz.multihead_plots import heads_figure  # noqa: E402
from transformer_lib.viz.positional_plots import sinusoid_clocks, sinusoid_wavelengths  # noqa: E402
from transformer_lib.viz.rnn_plots import STYLE, draw_rnn_vs_attention, plot_forward_times  # noqa: E402
from transformer_lib.viz.tables import markdown_table  # noqa: E402

LENGTHS = [8, 16, 32]
TIMES = {(name, "cpu"): [(k + 1) * T * 1e-6 for T in LENGTHS] for k, name in enumerate(STYLE)}


def _labelled(fig):
    axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>" and ax.axison]
    return all(ax.get_xlabel() and ax.get_ylabel() for ax in axes)


def test_forward_time_plot_draws_one_line_per_model_and_device_with_the_rates():
    flops = {name: [T * 1e3 for T in LENGTHS] for name in STYLE}
    fig = plot_forward_times(LENGTHS, TIMES, flops)
    ax_t, ax_r = fig.axes
    assert _labelled(fig) and len(ax_t.lines) == len(ax_r.lines) == len(TIMES)
    (name, _), seconds = next(iter(TIMES.items()))
    assert list(ax_r.lines[0].get_ydata()) == pytest.approx([f / t / 1e9 for f, t in zip(flops[name], seconds)])
    plt.close(fig)


def test_rnn_vs_attention_caption_quotes_the_times_at_that_length():
    fig, caption = draw_rnn_vs_attention(16, LENGTHS, TIMES)
    assert "T = 16" in caption and f"{TIMES['RNN (Python loop)', 'cpu'][1] * 1e3:.2f} ms" in caption
    assert fig.axes[2].get_xlabel()
    plt.close(fig)


def test_heads_figure_places_every_head_and_its_label():
    maps = torch.rand(6, 5, 5)
    fig = heads_figure(maps, list("abcde"), "six heads", labels=[f"p{h}" for h in range(6)], cols=4)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == [f"head {h}: p{h}" for h in range(6)]
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (2 * 5 + 2, 4 * 5 + 6)  # 2 rows and 4 columns of 5x5 maps, gaps of 2
    assert torch.allclose(torch.tensor(image[7:12, 7:12].data).float(), maps[5])  # head 5: row 1, column 1
    plt.close(fig)


@pytest.mark.parametrize("pos, d", [(10, 32), (200, 64)])
def test_sinusoid_clock_caption_counts_the_turns_of_each_pair(pos, d):
    fig, caption = sinusoid_clocks(pos, d)
    turns = [pos / 10000 ** (2 * i / d) / (2 * math.pi) for i in range(d // 2)]
    assert f"pair 0 has turned {turns[0]:.2f} times" in caption
    assert f"pair {d // 2 - 1} {turns[d // 2 - 1]:.5f} times" in caption
    assert len(fig.axes[1].lines) == d  # a circle and a hand per pair
    plt.close(fig)


def test_sinusoid_wavelengths_span_two_pi_to_two_pi_times_ten_thousand():
    fig, caption = sinusoid_wavelengths(64)
    assert _labelled(fig)
    wavelengths = fig.axes[0].lines[0].get_ydata()
    assert wavelengths[0] == pytest.approx(2 * math.pi)
    assert wavelengths[-1] == pytest.approx(2 * math.pi * 10000 ** (62 / 64))
    assert "32 pairs" in caption
    plt.close(fig)


def test_markdown_table_has_a_header_a_rule_and_one_line_per_row():
    table = markdown_table([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | x |", "| 2 | y |"]

"""Chapter figures in viz/ (rnn_plots, positional_plots, tables): labelled axes, captions whose
numbers follow from closed forms."""

import math

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.viz.positional_plots import plot_wavelengths  # noqa: E402
from transformer_lib.viz.rnn_plots import STYLE, draw_rnn_vs_attention, plot_step_times  # noqa: E402
from transformer_lib.viz.tables import markdown_table  # noqa: E402

LENGTHS = [8, 16, 32]
TIMES = {(name, "cpu"): [(k + 1) * T * 1e-6 for T in LENGTHS] for k, name in enumerate(STYLE)}


def _labelled(fig):
    axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>" and ax.axison]
    return all(ax.get_xlabel() and ax.get_ylabel() for ax in axes)


def test_forward_time_plot_draws_one_line_per_model_and_device_with_the_rates():
    flops = {name: [T * 1e3 for T in LENGTHS] for name in STYLE}
    fig = plot_step_times(LENGTHS, TIMES, flops)
    ax_t, ax_r = fig.axes
    assert _labelled(fig) and len(ax_t.lines) == len(ax_r.lines) == len(TIMES)
    (name, _), seconds = next(iter(TIMES.items()))
    assert list(ax_r.lines[0].get_ydata()) == pytest.approx([f / t / 1e9 for f, t in zip(flops[name], seconds)])
    plt.close(fig)


def test_forward_time_plot_puts_the_medians_interval_on_every_time_when_given_the_rounds():
    flops = {name: [T * 1e3 for T in LENGTHS] for name in STYLE}
    rounds = {
        key: [[t * f for f in (0.8, 0.9, 0.95, 1.0, 1.0, 1.05, 1.1, 1.2, 1.5)] for t in ts] for key, ts in TIMES.items()
    }
    fig = plot_step_times(LENGTHS, TIMES, flops, rounds=rounds)
    ax_t = fig.axes[0]
    assert "96.1% interval" in ax_t.get_ylabel() and len(ax_t.containers) == len(TIMES)
    (key, seconds) = next(iter(TIMES.items()))
    bars = ax_t.containers[0].lines[2][0].get_segments()  # one vertical segment per length
    # 9 rounds: the sign test's interval runs from the 2nd to the 8th smallest (0.9 and 1.2 of the median here)
    assert [s[0][1] for s in bars] == pytest.approx([0.9 * t * 1e3 for t in seconds])
    assert [s[1][1] for s in bars] == pytest.approx([1.2 * t * 1e3 for t in seconds])
    plt.close(fig)


def test_rnn_vs_attention_caption_quotes_the_times_at_that_length():
    fig, caption = draw_rnn_vs_attention(16, LENGTHS, TIMES)
    assert "T = 16" in caption and f"{TIMES['RNN (Python loop)', 'cpu'][1] * 1e3:.2f} ms" in caption
    assert fig.axes[2].get_xlabel()
    plt.close(fig)


def test_wavelengths_run_from_two_pi_to_two_pi_times_ten_thousand_to_the_last_pair():
    # closed form: pair i turns once every 2 pi 10000^(2i/d) positions (Vaswani et al. 2017, sec. 3.5)
    ax = plot_wavelengths((8, 64))
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    widths = [line for line in ax.lines if line.get_label().startswith("d_model")]
    assert len(widths) == 2
    for line, d in zip(widths, (8, 64)):
        wavelengths = line.get_ydata()
        assert len(wavelengths) == d // 2
        assert wavelengths[0] == pytest.approx(2 * math.pi)
        assert wavelengths[-1] == pytest.approx(2 * math.pi * 10000 ** ((d - 2) / d))
    plt.close(ax.figure)


def test_markdown_table_has_a_header_a_rule_and_one_line_per_row():
    table = markdown_table([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | x |", "| 2 | y |"]


def test_config_text_wraps_a_dataclass_within_the_width_and_keeps_every_field():
    from transformer_lib.models.configs import GPTConfig
    from transformer_lib.viz.tables import config_text

    config = GPTConfig(vocab_size=1024)
    text = config_text(config, width=60)
    assert all(len(line) <= 60 for line in text.splitlines()) and len(text.splitlines()) > 1
    assert " ".join(text.split()) == " ".join(repr(config).split())  # the dataclass's own repr, wrapped


def test_batching_roofline_draws_the_measured_and_bytes_bound_lines_and_the_balance_point():
    from transformer_lib.viz.serving_plots import plot_batching_roofline

    rows = [{"batch": b, "tok_per_s": 10.0 * b**0.5, "intensity": 0.5 * b} for b in (1, 2, 4, 8)]
    fig = plot_batching_roofline(rows, balance=3.0)
    ax1, ax2 = fig.axes
    assert _labelled(fig) and ax1.get_title() and ax2.get_title()
    assert list(ax1.lines[1].get_ydata()) == [10.0, 20.0, 40.0, 80.0]  # B x the batch-1 speed
    assert list(ax2.lines[1].get_ydata()) == [3.0, 3.0]  # the balance point, across
    plt.close(fig)
    with pytest.raises(
        ValueError, match=r"balance must be a finite number > 0 \(the machine's FLOPs per byte\), got 0"
    ):
        plot_batching_roofline(rows, balance=0)
    with pytest.raises(
        ValueError, match=r"rows\[0\]'s missing keys must be empty .*got 2, e.g. \['intensity', 'tok_per_s'\]"
    ):
        plot_batching_roofline([{"batch": 1}], balance=3.0)
    timed = [{**r, "decode_seconds": 1.0, "decode_times": [0.5, 1.0, 2.0]} for r in rows]  # tok/s x2 .. x0.5
    fig = plot_batching_roofline(timed, balance=3.0)
    (bars,) = fig.axes[0].collections  # one vertical bar per batch, from the slowest round to the fastest
    ends = [tuple(seg[:, 1]) for seg in bars.get_segments()]
    assert ends == [pytest.approx((r["tok_per_s"] / 2, 2 * r["tok_per_s"])) for r in rows]


def test_rnn_vs_attention_with_rounds_draws_whiskers_and_quotes_the_range():
    rounds = {key: [[t * 0.9, t, t * 1.2] for t in ts] for key, ts in TIMES.items()}
    fig, caption = draw_rnn_vs_attention(16, LENGTHS, TIMES, rounds=rounds)
    t = TIMES["RNN (Python loop)", "cpu"][1] * 1e3
    assert f"{t:.2f} ms ({0.9 * t:.2f}-{1.2 * t:.2f})" in caption and "fastest-slowest of 3 rounds" in caption
    from matplotlib.container import BarContainer

    (bars,) = [c for c in fig.axes[2].containers if isinstance(c, BarContainer)]
    segments = bars.errorbar.lines[2][0].get_segments()  # one whisker per bar: [(low, y), (high, y)] in ms
    assert [s[0][0] for s in segments] == pytest.approx([0.9 * ts[1] * 1e3 for ts in TIMES.values()])
    assert [s[1][0] for s in segments] == pytest.approx([1.2 * ts[1] * 1e3 for ts in TIMES.values()])
    plt.close(fig)

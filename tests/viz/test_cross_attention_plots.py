"""viz.cross_attention_plots: every text in the figures is at least 8 pt, and the figure is no wider than asked."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from transformer_lib.viz.cross_attention_plots import cross_attention_heads_figure  # noqa: E402


def test_cross_attention_figure_text_is_at_least_8_pt_and_width_bounded():
    source = list("the twenty-first of March, nineteen eighty-seven")
    output = list("1987-03-21") + ["<eos>"]
    w = torch.softmax(torch.randn(2, 4, len(output), len(source)), -1)
    fig = cross_attention_heads_figure(source, output, w, layer=1, text="".join(source), width=9.0)
    texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text()]
    assert len(texts) > len(source) and min(t.get_fontsize() for t in texts) >= 8
    assert fig.get_size_inches()[0] <= 9.0
    tick_texts = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert tick_texts == source
    plt.close(fig)

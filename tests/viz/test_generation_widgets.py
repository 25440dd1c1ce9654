"""Chapter 07's sampling figure: the entropies in its caption are those of the distribution it draws, in bits,
checked against ``torch.distributions.Categorical`` (the trace/slider helpers are tested in
serving/test_generate.py)."""

import math

import matplotlib.pyplot as plt
import pytest
import torch

from transformer_lib.viz.generation_widgets import Sampling, sampling_frame


def bits(p: torch.Tensor) -> float:
    return float(torch.distributions.Categorical(probs=p).entropy()) / math.log(2.0)


def test_sampling_frame_caption_reports_entropies_in_bits():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0, -2.0])
    vocab = list("abcdef")
    fig, caption = sampling_frame(logits, vocab, Sampling(0.7, top_k=3), "xyz", "ctx", n_show=6)
    plt.close(fig)
    kept = (logits[:3] / 0.7).softmax(-1)  # top-3 at temperature 0.7, straight from PyTorch
    assert f"entropy {bits(kept):.2f} bits (the model's own: {bits(logits.softmax(-1)):.2f})" in caption
    assert "3 of 6 tokens can be drawn" in caption


def test_greedy_has_zero_bits():
    fig, caption = sampling_frame(torch.tensor([0.5, 2.0, 1.0]), list("abc"), Sampling(0.0), "b", "ctx", n_show=3)
    plt.close(fig)
    assert "1 of 3 tokens can be drawn; entropy 0.00 bits" in caption


def test_a_frame_slider_shows_its_first_frame_as_a_picture_without_javascript(monkeypatch):
    """Displayed, a frame slider first writes the frame it starts on as a plain <img> inside <noscript> (a page read
    without JavaScript shows it), then the widget itself."""
    import base64

    import matplotlib.pyplot as plt
    from IPython import display as ipd

    from transformer_lib.viz.widgets import figure_to_png, frame_slider

    def render(v):
        fig, ax = plt.subplots(figsize=(2, 1))
        ax.plot([0, v])
        return fig, f"<b>value {v}</b>"

    shown = []
    monkeypatch.setattr(ipd, "display", lambda obj, raw=False, **kw: shown.append(obj))
    frame_slider(render, [1, 2, 3], "v", initial=2)._ipython_display_()
    picture, widget = shown
    first = base64.b64encode(figure_to_png(render(2)[0])).decode("ascii")
    assert picture["text/html"].startswith("<noscript><figure><img") and first in picture["text/html"]
    assert 'alt="v = 2"' in picture["text/html"] and "<b>value 2</b>" in picture["text/html"]
    assert "application/vnd.jupyter.widget-view+json" in widget


def test_a_frame_slider_needs_a_value():
    from transformer_lib.viz.widgets import frame_slider

    with pytest.raises(ValueError, match=r"len\(values\) must be an int >= 1 \(one frame per value\), got 0"):
        frame_slider(lambda v: None, [], "v")


def test_trace_generation_refuses_more_tokens_than_the_block_holds():
    from transformer_lib.models.configs import GPTConfig
    from transformer_lib.models.transformer import GPT
    from transformer_lib.viz.generation_widgets import trace_generation

    class Letters:
        encode = staticmethod(lambda text: [ord(c) - 97 for c in text])
        decode = staticmethod(lambda ids: "".join(chr(97 + i) for i in ids))

    model = GPT(GPTConfig(vocab_size=26, block_size=8, d_model=16, n_heads=2, n_layers=1))
    with pytest.raises(
        ValueError, match=r"n_new must be an int in \[0, 3\] \(after 5 prompt tokens, within block_size\)"
    ):
        trace_generation(model, Letters, "abcde", 4)

"""Chapter 07's sampling figure: the entropies in its caption are those of the distribution it draws, in bits,
checked against ``torch.distributions.Categorical`` (the trace/slider helpers are tested in
serving/test_generate.py)."""

import math

import matplotlib.pyplot as plt
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

"""Chapter 08's pruning-order frame: it crosses out exactly the removed heads and captions the marked loss."""
import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.viz.pruning_plots import pruning_frame  # noqa: E402


def test_pruning_frame_crosses_out_exactly_the_removed_heads():
    scores = torch.rand(2, 4)
    removed = torch.tensor([[True, False, False, True], [False, False, True, False]])
    fig, caption = pruning_frame(scores, removed, [0.0, 0.125, 0.25, 0.375], [1.5, 1.52, 1.55, 1.6], 3, 1.5)
    crosses = [(int(x), int(y)) for line in fig.axes[0].lines if line.get_marker() == "x"
               for x, y in zip(line.get_xdata(), line.get_ydata())]
    assert sorted(crosses) == [(0, 0), (2, 1), (3, 0)]  # (head, layer) of each True in removed
    marked = [line for line in fig.axes[1].lines if line.get_marker() == "o"][0]
    assert (marked.get_xdata()[0], marked.get_ydata()[0]) == (0.375, 1.6)
    assert caption == "3 heads removed: validation loss 1.600 (unpruned 1.500)"
    assert fig.axes[0].get_xlabel() == "head" and fig.axes[1].get_ylabel() == "validation loss (nats/char)"
    plt.close(fig)


def test_pruning_frame_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="removed"):
        pruning_frame(torch.rand(2, 4), torch.zeros(2, 3, dtype=torch.bool), [0.0], [1.0], 0, 1.0)
    with pytest.raises(ValueError, match="index"):
        pruning_frame(torch.rand(2, 4), torch.zeros(2, 4, dtype=torch.bool), [0.0], [1.0], 1, 1.0)

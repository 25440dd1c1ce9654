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
    crosses = [
        (int(x), int(y))
        for line in fig.axes[0].lines
        if line.get_marker() == "x"
        for x, y in zip(line.get_xdata(), line.get_ydata())
    ]
    assert sorted(crosses) == [(0, 0), (2, 1), (3, 0)]  # (head, layer) of each True in removed
    marked = [line for line in fig.axes[1].lines if line.get_marker() == "o"][0]
    assert (marked.get_xdata()[0], marked.get_ydata()[0]) == (0.375, 1.6)
    assert caption == "3 heads removed: validation loss 1.600 (unpruned 1.500)"
    assert fig.axes[0].get_xlabel() == "head" and fig.axes[1].get_ylabel() == "validation loss (nats/char)"
    plt.close(fig)


def test_pruning_frame_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"removed must be a tensor of shape \(2, 4\) \(scores' shape"):
        pruning_frame(torch.rand(2, 4), torch.zeros(2, 3, dtype=torch.bool), [0.0], [1.0], 0, 1.0)
    with pytest.raises(ValueError, match=r"index must be an int in \[0, 0\].*got 1"):
        pruning_frame(torch.rand(2, 4), torch.zeros(2, 4, dtype=torch.bool), [0.0], [1.0], 1, 1.0)


def test_interval_curves_draws_each_mean_from_one_with_its_band():
    from transformer_lib.viz.pruning_plots import interval_curves

    stats = {"a": [(0.9, 0.01), (0.8, 0.02)], "b": [(0.7, 0.05), (0.5, 0.1)]}
    fig = interval_curves([6, 12], stats, total=72)
    ax = fig.axes[0]
    assert [list(line.get_ydata()) for line in ax.lines] == [[1.0, 0.9, 0.8], [1.0, 0.7, 0.5]]
    band = ax.collections[1].get_paths()[0].vertices[:, 1]  # the fill of "b": from mean - h to mean + h
    assert band.min() == pytest.approx(0.4) and band.max() == pytest.approx(1.0)
    assert "72" in ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    plt.close(fig)
    with pytest.raises(ValueError, match=r"stats\['a'\] must hold exactly 1 item\(s\) \(one \(mean, half_width\)"):
        interval_curves([6], stats, total=72)


def test_score_heatmaps_draws_one_map_per_entry_with_its_values():
    from transformer_lib.viz.pruning_plots import score_heatmaps

    maps = {"a": torch.arange(6.0).view(2, 3), "b": torch.ones(2, 3)}
    fig = score_heatmaps(maps, "scores")
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 2 and images[0].get_array().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert [ax.get_title() for ax in fig.axes[:2]] == ["a", "b"] and fig.axes[0].get_xlabel() == "head"
    plt.close(fig)
    with pytest.raises(ValueError, match=r"maps\['a'\] must be a tensor of shape \(n_layers, n_heads\), got \(3,\)"):
        score_heatmaps({"a": torch.ones(3)}, "x")
    with pytest.raises(ValueError, match=r"len\(maps\) must be an int >= 1"):
        score_heatmaps({}, "x")


def test_score_heatmaps_labels_each_colour_bar_with_its_unit():
    from transformer_lib.viz.pruning_plots import score_heatmaps

    fig = score_heatmaps({"a": torch.ones(2, 3), "b": torch.ones(2, 3)}, "scores", units={"a": "nats per character"})
    bars = [ax for ax in fig.axes if not ax.images]  # the colour bars' axes
    assert [ax.get_ylabel() for ax in bars] == ["nats per character", ""]
    plt.close(fig)

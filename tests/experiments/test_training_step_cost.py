"""Chapter 01's training-step clock (experiments.training_step_cost): what a step runs, what the fits return,
against closed forms (a power law, a straight line, numpy's polyfit, the FLOPs of a linear layer)."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from transformer_lib.book_tools import timing
from transformer_lib.experiments.training_step_cost import (
    loglog_slope,
    per_token_seconds,
    training_step_flops,
    training_step_rounds,
    training_step_times,
)


def test_loglog_slope_recovers_the_exponent_of_a_power_law():
    lengths = [16, 64, 256, 1024]
    assert loglog_slope(lengths, [3e-6 * T**2 for T in lengths]) == pytest.approx(2.0)
    assert loglog_slope(lengths, [5e-3 * T for T in lengths]) == pytest.approx(1.0)
    assert loglog_slope(lengths, [0.01] * 4) == pytest.approx(0.0, abs=1e-12)


def test_fits_agree_with_numpy_polyfit_on_noisy_points():
    rng = np.random.default_rng(0)
    T = np.array([64.0, 128, 256, 512, 1024])
    t = 2e-5 * T + 1e-3 + rng.normal(0, 1e-4, T.shape)
    assert per_token_seconds(T, t) == pytest.approx(np.polyfit(T, t, 1)[0])
    assert loglog_slope(T, t) == pytest.approx(np.polyfit(np.log(T), np.log(t), 1)[0])


def test_fits_reject_bad_points():
    with pytest.raises(
        ValueError, match=r"seconds must be a tensor of shape \(3,\) \(one time per length\), got \(2,\)"
    ):
        loglog_slope([1, 2, 3], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"len\(lengths\) must be an int >= 2 \(points to fit a line through\), got 1"):
        per_token_seconds([1.0], [1.0])
    with pytest.raises(
        ValueError, match=r"min\(seconds\) must be a finite number > 0 \(a log-log fit needs logs\), got 0.0"
    ):
        loglog_slope([1, 2], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"lengths must be finite"):
        loglog_slope([1, float("nan")], [1.0, 1.0])


def test_training_step_flops_of_a_linear_layer_match_the_closed_form():
    # forward x W^T: 2 T a b; backward to the weight (x needs no gradient): another 2 T a b
    T, a, b = 7, 5, 3
    assert training_step_flops(nn.Linear(a, b), torch.randn(1, T, a)) == 4 * T * a * b
    assert training_step_flops(nn.Linear(a, b).to("meta"), torch.empty(1, T, a, device="meta")) == 4 * T * a * b


class Costly(nn.Module):
    """A model whose step costs ``rate * T`` seconds on a fake clock; it records whether gradients arrived."""

    def __init__(self, clock, rate):
        super().__init__()
        self.clock, self.rate, self.w = clock, rate, nn.Parameter(torch.ones(()))
        self.grads_seen = 0

    def forward(self, x):  # x: (1, T, width)
        self.clock[0] += self.rate * x.shape[1]
        y = x * self.w  # (1, T, width)
        y.register_hook(self._count)  # runs once per backward pass through this output
        return y, None  # a tuple, as nn.LSTM returns

    def _count(self, g):
        self.grads_seen += 1
        return g


def test_training_step_times_are_medians_of_forward_and_backward(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(timing, "_clock", lambda: clock[0])
    loop, attn = Costly(clock, 1.0), Costly(clock, 0.25)
    times = training_step_times({"loop": loop, "attention": attn}, [4, 8], width=3, repeats=3)
    assert times == {"loop": [4.0, 8.0], "attention": [1.0, 2.0]}
    assert loop.grads_seen == 2 * (1 + 3)  # two lengths, one warm-up + three timed steps, each with a backward
    assert loop.w.grad is None  # gradients are cleared after every step


def test_training_step_rounds_keep_every_round_after_the_warm_up(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(timing, "_clock", lambda: clock[0])
    loop, attn = Costly(clock, 1.0), Costly(clock, 0.25)
    rounds = training_step_rounds({"loop": loop, "attention": attn}, [4, 8], width=3, repeats=5, warmup=2)
    assert rounds == {"loop": [[4.0] * 5, [8.0] * 5], "attention": [[1.0] * 5, [2.0] * 5]}
    assert loop.grads_seen == 2 * (2 + 5)  # two lengths, two warm-up + five timed steps
    ratio = timing.ratio_from_times(rounds["attention"][1], rounds["loop"][1])
    assert ratio.ratio == 0.25 and ratio.verdict() == "faster"

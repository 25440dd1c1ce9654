"""Chapter 01's clock: how long one *training step* (forward and backward) of a recurrent loop and of attention
takes at sequence length T, and how that time grows with T.

Used in chapter 01.

* ``training_step_rounds``: every timed round of one forward + backward pass per model and length, the models run
  round-robin so that ratios of one round compare neighbouring calls (``timing.ratio_from_times``).
* ``training_step_times``: the medians of those rounds.
* ``training_step_flops``: floating-point operations of the matrix products in one forward + backward pass.
* ``loglog_slope``: the exponent k of ``time ~ T^k``, a least-squares line through ``(log T, log time)``.
* ``per_token_seconds``: the cost of one more token, a least-squares line through ``(T, time)``.

The timings use whatever threads PyTorch has (``torch.get_num_threads()``): attention's advantage *is* its
parallel work, so timing it on one thread would measure something else.
"""

from __future__ import annotations

import statistics
from functools import partial
from typing import Sequence

import numpy as np
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from ..utils.checks import check_int, check_number, check_sequence, check_tensor
from ..book_tools.timing import interleaved_times


def _training_step(model: nn.Module, x: torch.Tensor):
    """A zero-argument function running one forward and backward pass of ``model`` on ``x: (1, T, width)``."""
    params = [p for p in model.parameters() if p.requires_grad]

    def step():
        out = model(x)
        out = out[0] if isinstance(out, tuple) else out  # nn.LSTM / our RNNs return (outputs, state)
        out.float().square().mean().backward()  # a stand-in loss: every output feeds the gradient
        for p in params:
            p.grad = None

    return step


def training_step_rounds(
    models: dict[str, nn.Module],
    lengths: Sequence[int],
    width: int,
    device=None,
    seed: int = 0,
    repeats: int = 9,
    warmup: int = 2,
) -> dict[str, list[list[float]]]:
    """``{name: [[seconds of each timed round] for each length]}`` for ``models`` (name -> module mapping
    ``x: (1, T, width)`` to a tensor or a tuple whose first element is the output).

    A training step is a forward pass, a scalar loss (mean of the squared outputs) and the backward pass to every
    parameter. At each length every model first runs ``warmup`` untimed steps, then ``repeats`` rounds call the
    models in turn (``timing.interleaved_times``), so round ``r`` of two models was measured side by side: the
    pairing ``timing.ratio_from_times`` needs. ``device``: where the models and inputs live (CUDA timings wait for
    the kernels).
    """
    check_int("width", width, min=1)
    check_sequence("lengths", lengths, min_len=1, items=partial(check_int, min=1), note="sequence lengths to time")
    gen = torch.Generator().manual_seed(seed)
    rounds = {name: [] for name in models}
    for T in lengths:
        x = torch.randn(1, T, width, generator=gen).to(device)  # (B=1, T, width)
        times = interleaved_times(
            {name: _training_step(m, x) for name, m in models.items()}, repeats=repeats, warmup=warmup, device=device
        )
        for name, seconds in times.items():
            rounds[name].append(seconds)
    return rounds


def training_step_times(
    models: dict[str, nn.Module],
    lengths: Sequence[int],
    width: int,
    device=None,
    seed: int = 0,
    repeats: int = 5,
    warmup: int = 1,
) -> dict[str, list[float]]:
    """``{name: [median seconds of one training step at each length]}``: the medians of
    ``training_step_rounds`` (same arguments)."""
    rounds = training_step_rounds(models, lengths, width, device, seed, repeats, warmup)
    return {name: [statistics.median(r) for r in per_length] for name, per_length in rounds.items()}


def training_step_flops(fn, x: torch.Tensor) -> int:
    """FLOPs of the matrix products in one training step: ``fn(x)`` (a module or a function of ``x: (1, T, width)``),
    the mean-of-squares loss, and its backward pass (``torch.utils.flop_counter``).

    ``x`` needs no gradient, so the backward pass computes the weights' gradients only. Works on the ``meta``
    device (shapes only, nothing computed). Fused kernels the counter does not know count 0 (``nn.LSTM``): count
    a written-out twin instead (``rnn.LSTM``).
    """
    with FlopCounterMode(display=False) as counter:
        out = fn(x)
        out = out[0] if isinstance(out, tuple) else out
        out.float().square().mean().backward()
    return counter.get_total_flops()


def _check_points(lengths: Sequence[float], seconds: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """``lengths`` and ``seconds`` as float arrays, checked: two equal-length runs of at least 2 positive points."""
    T, t = np.asarray(lengths, dtype=float), np.asarray(seconds, dtype=float)
    check_tensor("lengths", torch.from_numpy(T), ("N",), finite=True)
    check_tensor("seconds", torch.from_numpy(t), T.shape, finite=True, note="one time per length")
    check_int("len(lengths)", len(T), min=2, note="points to fit a line through")
    check_number("min(lengths)", float(T.min()), min=0, min_open=True, note="a log-log fit needs logs")
    check_number("min(seconds)", float(t.min()), min=0, min_open=True, note="a log-log fit needs logs")
    return T, t


def loglog_slope(lengths: Sequence[float], seconds: Sequence[float]) -> float:
    """The exponent k in ``seconds ~ c * lengths^k``: the least-squares slope of log(seconds) against log(T).

    1 means time proportional to T, 2 proportional to T^2; a flat (fixed-cost) stretch gives about 0.
    """
    T, t = _check_points(lengths, seconds)
    x, y = np.log(T), np.log(t)
    x_c = x - x.mean()
    return float((x_c * (y - y.mean())).sum() / (x_c**2).sum())


def per_token_seconds(lengths: Sequence[float], seconds: Sequence[float]) -> float:
    """The least-squares slope of seconds against T: the time one more token adds (seconds per token)."""
    T, t = _check_points(lengths, seconds)
    T_c = T - T.mean()
    return float((T_c * (t - t.mean())).sum() / (T_c**2).sum())

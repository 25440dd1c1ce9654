"""Chapter 01's cost measurement: how many dependent operator calls, how much arithmetic, and how much time a
recurrent loop and attention spend on a sequence of length T.

* ``count_op_calls``, ``count_flops``: operator calls and matrix-product FLOPs of one call.
* ``forward_times``: interleaved median forward times of several models over a range of lengths.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from ..timing import interleaved_medians


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def count_op_calls(fn: Callable, *args) -> int:
    """How many PyTorch operator calls (``aten`` ops: matmuls, adds, tanh, ...) ``fn(*args)`` makes."""
    with torch.no_grad(), _OpCounter() as counter:
        fn(*args)
    return counter.calls


def count_flops(fn: Callable, *args) -> int:
    """Floating-point operations of the matrix products in ``fn(*args)`` (``torch.utils.flop_counter``).

    Fused kernels the counter does not know count 0 (``nn.LSTM``, the CPU flash-attention kernel):
    count their written-out twins instead (``LSTM``; ``MultiHeadAttention(x, need_weights=True)``).
    """
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn(*args)
    return counter.get_total_flops()


def forward_times(models: dict[str, nn.Module], lengths: Sequence[int], width: int, device=None,
                  seed: int = 0) -> dict[str, list[float]]:
    """``{name: [median seconds of one forward pass at each length]}`` for ``models`` (name -> module mapping
    ``(1, T, width)`` to anything), timed round-robin at each length (``timing.interleaved_medians``): 5 repeats
    up to T = 1024, 3 beyond. ``device``: where the models and inputs live."""
    gen = torch.Generator().manual_seed(seed)
    times = {name: [] for name in models}
    for T in lengths:
        x = torch.randn(1, T, width, generator=gen).to(device)  # (B=1, T, width)
        with torch.no_grad():
            medians = interleaved_medians({name: (lambda m=m: m(x)) for name, m in models.items()},
                                          repeats=5 if T <= 1024 else 3, warmup=1, device=device)
        for name, seconds in medians.items():
            times[name].append(seconds)
    return times

"""Chapter 01's cost measurement: how many dependent operator calls, how much arithmetic, and how much time a
recurrent loop and attention spend on a sequence of length T.

Used in chapter 01.

* ``count_op_calls``, ``count_flops``: operator calls and matrix-product FLOPs of one call.
* timing a training step over a range of lengths: ``experiments/training_step_cost.py``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode


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

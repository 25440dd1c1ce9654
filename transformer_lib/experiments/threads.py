"""``torch_threads(n)``: run a block with ``n`` CPU threads, then restore the previous number.

Used in chapter 12.

The chapters' experiments train models so small (d_model 32-64) that a second CPU thread saves little, while on a
busy machine it can cost a lot: every operation waits at a barrier for both threads, and a thread the scheduler has
put aside stalls the other. Measured on the book's shared 2-core machine under load, 60 training steps of
chapter 06's character GPT took 87 s with 2 threads and 6 s with 1, with the same losses.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from ..utils.checks import check_int


@contextmanager
def torch_threads(n: int = 1):
    """Within the block, ``torch.get_num_threads() == n``; the previous value is restored on exit."""
    n = check_int("n", n, min=1)
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)

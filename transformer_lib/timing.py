"""Timing that tolerates a noisy machine: interleaved repetitions and medians.

Timing A fully, then B, lets a burst of load from another process land on one of them only.
``interleaved_medians`` runs them round-robin (A, B, A, B, ...) so such noise hits all alike, and
reports the median of each, which one slow run cannot move. Compare *ratios* measured in the
same call, never absolute times from different runs. On CUDA, kernels run asynchronously, so
the clock is read only after ``torch.cuda.synchronize()``.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

_clock = time.perf_counter  # seconds; a module attribute so tests can replace it


def synchronize(device) -> None:
    """Wait for the kernels queued on ``device`` when it is a CUDA device (no-op on CPU or ``None``)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int = 7, warmup: int = 2,
                        device=None) -> dict[str, float]:
    """Median seconds per call of each function in ``fns`` (name -> zero-argument callable).

    Each function first runs ``warmup`` times (untimed: first calls pay for allocation and caches),
    then ``repeats`` timed rounds call every function once, in the dict's order. ``device``: pass the
    CUDA device the functions run on so each timing waits for its kernels to finish.
    """
    if not isinstance(fns, dict) or not fns or not all(callable(f) for f in fns.values()):
        raise ValueError(f"fns must be a non-empty dict of name -> callable, got {fns!r:.80}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    synchronize(device)
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = _clock()
            fn()
            synchronize(device)
            times[name].append(_clock() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}

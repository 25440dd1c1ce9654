"""Shared timing helpers: interleaved repetitions, medians, ratios against a baseline in the same run."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int = 7, warmup: int = 2,
                        device=None) -> dict[str, float]:
    """Median seconds per call of each function, measured round-robin so noise hits all alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    _sync(device)
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def table_lines(header: list[str], rows: list[list]) -> list[str]:
    """A right-aligned plain-text table: header, a rule, then one line per row."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    return ["  ".join(str(x).rjust(w) for x, w in zip(line, widths)) for line in [header, ["-" * w for w in widths],
                                                                                 *rows]]


def print_table(header: list[str], rows: list[list]) -> None:
    print("\n".join(table_lines(header, rows)))


def format_table(title: str, header: list[str], rows: list[list]) -> str:
    """The table under a ``## title`` line, as one string."""
    return "\n".join([f"## {title}", *table_lines(header, rows)])

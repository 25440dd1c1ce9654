"""Timing that tolerates a noisy machine: interleaved repetitions and medians.

Used in chapters 01, 03, 07, 08, 09, 10, 11 and 12.

Timing A fully, then B, lets a burst of load from another process land on one of them only.
``interleaved_medians`` runs them round-robin (A, B, A, B, ...) so such noise hits all alike, and
reports the median of each, which one slow run cannot move. Compare *ratios* measured in the
same call, never absolute times from different runs: ``ratio_with_interval`` gives the median ratio of
two such timings with an interval, so that prose says "faster" only when the interval excludes 1
(``claims.claim_verdict``). On CUDA, kernels run asynchronously, so the clock is read only after
``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from ..utils.checks import check_equal, check_int, check_number, check_type

_clock = time.perf_counter  # seconds; a module attribute so tests can replace it


def synchronize(device) -> None:
    """Wait for the kernels queued on ``device`` when it is a CUDA device (no-op on CPU or ``None``)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(
    fns: dict[str, Callable[[], object]], repeats: int = 7, warmup: int = 2, device=None
) -> dict[str, float]:
    """Median seconds per call of each function in ``fns`` (name -> zero-argument callable).

    Each function first runs ``warmup`` times (untimed: first calls pay for allocation and caches),
    then ``repeats`` timed rounds call every function once, in the dict's order. ``device``: pass the
    CUDA device the functions run on so each timing waits for its kernels to finish.
    """
    times = interleaved_times(fns, repeats=repeats, warmup=warmup, device=device)
    return {name: statistics.median(ts) for name, ts in times.items()}


def interleaved_times(
    fns: dict[str, Callable[[], object]], repeats: int = 7, warmup: int = 2, device=None
) -> dict[str, list[float]]:
    """Every timed call's seconds, per function, from the same round-robin as ``interleaved_medians``.

    Round ``r`` of every list was measured in the same pass over ``fns``, so ``times[a][r] / times[b][r]`` is a
    ratio of two neighbouring calls: the pairing that ``ratio_with_interval`` needs.
    """
    check_int("len(fns)", len(check_type("fns", fns, dict, expected="a dict of name -> callable")), min=1)
    for name, fn in fns.items():
        check_type(f"fns[{name!r}]", fn, methods=("__call__",), expected="a zero-argument callable")
    check_int("repeats", repeats, min=1, note="timed rounds")
    check_int("warmup", warmup, min=0, note="untimed rounds first")
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
    return times


CONFIDENCE = 0.95  # the book's one level: every interval is the narrowest whose coverage reaches it, where n allows


def median_interval_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics that bound the median of ``n`` samples with at least
    ``confidence``: the narrowest symmetric pair that does. Distribution-free (the sign test): the true median lies
    below the k-th smallest of n samples with probability P(Binomial(n, 1/2) >= k). With too few samples for the
    confidence no pair reaches it: the whole range (min, max), whose coverage ``rank_coverage`` tells.
    """
    alpha = 1.0 - confidence
    cdf, k = 0.0, 0
    # largest k with P(Binomial(n, 1/2) < k) <= alpha / 2, so [x_(k), x_(n-k+1)] (1-based) covers the median
    while k < n // 2:
        cdf_next = cdf + math.comb(n, k) / 2**n
        if cdf_next > alpha / 2:
            break
        cdf, k = cdf_next, k + 1
    return (k - 1, n - k) if k >= 1 else (0, n - 1)


def rank_coverage(n: int, lo: int, hi: int) -> float:
    """The probability that the ``lo``-th to ``hi``-th smallest of ``n`` samples (0-based) contain the median of
    the distribution they come from, whatever it is: P(lo < N <= hi) for N ~ Binomial(n, 1/2), the number of
    samples below the median. ``rank_coverage(5, 0, 4)`` (min to max of 5) is 30/32 = 93.75%."""
    check_int("hi", hi, max=n - 1, note=f"a 0-based rank among n = {n} samples")
    check_int("lo", lo, min=0, max=hi, note="a 0-based rank, at most hi")
    return sum(math.comb(n, j) for j in range(lo + 1, hi + 1)) / 2**n


def interval_coverage(rounds: int) -> float:
    """The coverage of the interval ``ratio_from_times`` prints for ``rounds`` paired timings: 0.9609 for 9."""
    return rank_coverage(rounds, *median_interval_ranks(rounds))


def interval_note(rounds: int) -> str:
    """``"96.1% interval over 9 rounds"``: what a ratio's interval covers, said once under a table of them."""
    return f"{interval_coverage(rounds):.1%} interval over {rounds} rounds"


def median_interval(values: list[float]) -> tuple[float, float]:
    """The interval around the median of ``values`` that ``ratio_from_times`` uses (``median_interval_ranks``'
    order statistics); its coverage is ``interval_coverage(len(values))``."""
    ordered = sorted(values)
    lo, hi = median_interval_ranks(len(ordered))
    return ordered[lo], ordered[hi]


@dataclass(frozen=True)
class Ratio:
    """A median ratio ``a / b`` of paired, interleaved timings with a distribution-free interval.

    ``low``-``high`` bound the median of the per-round ratios (the sign test's order statistics): the narrowest
    pair that reaches the book's level ``CONFIDENCE``, or the smallest and largest ratio when ``rounds`` is too
    few for that. ``coverage`` is the probability these ranks actually give (``rank_coverage``), and it is what
    the interval is printed with: 96.1% over 9 rounds, 93.75% over 5. ``ratio > 1``: ``a`` took longer than ``b``.
    """

    ratio: float
    low: float
    high: float
    coverage: float
    rounds: int
    seconds_a: float  # median seconds per call of a
    seconds_b: float  # median seconds per call of b

    def excludes_one(self) -> bool:
        """True when the interval lies wholly above or wholly below 1: a difference this run can tell."""
        return self.low > 1.0 or self.high < 1.0

    def verdict(self) -> str:
        """``"slower"`` (a took longer than b beyond the noise), ``"faster"``, or ``"within_noise"``: a key for
        the prose, which each language maps to its own words."""
        if self.low > 1.0:
            return "slower"
        if self.high < 1.0:
            return "faster"
        return "within_noise"

    def __str__(self) -> str:
        return f"{self.ratio:.2f}x ({self.low:.2f}-{self.high:.2f}, {interval_note(self.rounds)})"

    def short(self) -> str:
        """``"1.91x (1.82-2.02)"``: the ratio and its interval, for a table that states the coverage once
        (``interval_note``) under it."""
        return f"{self.ratio:.2f}x ({self.low:.2f}-{self.high:.2f})"


def ratio_with_interval(
    fn_a: Callable[[], object],
    fn_b: Callable[[], object],
    repeats: int = 9,
    warmup: int = 2,
    device=None,
) -> Ratio:
    """Time ``fn_a`` and ``fn_b`` in turn (A, B, A, B, ...) and give the median of the ratios ``t_a / t_b``
    round by round, with its interval.

    Pairing each A with the B right after it lets both feel the same load, so the ratio holds where absolute
    times drift. With ``repeats=9`` the interval runs from the 2nd to the 8th smallest ratio (96.1% coverage).
    """
    times = interleaved_times({"a": fn_a, "b": fn_b}, repeats=repeats, warmup=warmup, device=device)
    return ratio_from_times(times["a"], times["b"])


def ratio_from_times(times_a: list[float], times_b: list[float]) -> Ratio:
    """``Ratio`` of two lists of paired timings (round ``r`` of each measured side by side)."""
    check_int("len(times_a)", len(times_a), min=1, note="timed rounds")
    check_equal("len(times_b)", len(times_b), len(times_a), note="paired with times_a, round by round")
    check_number("min(times_a)", min(times_a), min=0, note="seconds")
    check_number("min(times_b)", min(times_b), min=0, min_open=True, note="seconds, each a divisor")
    ratios = [a / b for a, b in zip(times_a, times_b)]
    low, high = median_interval(ratios)
    return Ratio(
        ratio=statistics.median(ratios),
        low=low,
        high=high,
        coverage=interval_coverage(len(ratios)),
        rounds=len(ratios),
        seconds_a=statistics.median(times_a),
        seconds_b=statistics.median(times_b),
    )


def _median_and_range(times: list[float]) -> tuple[str, str, str, str]:
    """Median, fastest and slowest of ``times`` (seconds) as 3-digit strings, and their unit (ms below 1 s)."""
    check_int("len(times)", len(times), min=1, note="seconds, one per timed round")
    med, lo, hi = statistics.median(times), min(times), max(times)
    scale, unit = (1e3, "ms") if hi < 1.0 else (1.0, "s")
    return f"{med * scale:.3g}", f"{lo * scale:.3g}", f"{hi * scale:.3g}", unit


def median_with_spread(times: list[float]) -> str:
    """``"12.3 ms (11.8-13.1 ms over 9 runs)"``: a median time printed with its range, for the book's prose."""
    med, lo, hi, unit = _median_and_range(times)
    return f"{med} {unit} ({lo}-{hi} {unit} over {len(times)} runs)"


def median_with_range(times: list[float]) -> str:
    """``"12.3 ms (11.8-13.1)"``: a median time and its fastest-slowest range, for a table column whose header
    says over how many runs."""
    med, lo, hi, unit = _median_and_range(times)
    return f"{med} {unit} ({lo}-{hi})"

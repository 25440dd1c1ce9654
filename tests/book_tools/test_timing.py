"""transformer_lib.book_tools.timing: round-robin order, warm-up, medians (with a fake clock, no real timing)."""

import pytest
import torch

from transformer_lib.book_tools import timing


class FakeClock:
    """Each call to a timed function advances the clock by that function's next duration."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_interleaved_medians_runs_round_robin_after_warmup_and_takes_medians(monkeypatch):
    clock, calls = FakeClock(), []
    monkeypatch.setattr(timing, "_clock", clock)
    durations = {"a": iter([9, 9, 1.0, 5.0, 2.0]), "b": iter([9, 9, 10.0, 30.0, 20.0])}

    def make(name):
        def fn():
            calls.append(name)
            clock.now += next(durations[name])

        return fn

    out = timing.interleaved_medians({"a": make("a"), "b": make("b")}, repeats=3, warmup=2)
    assert calls == ["a", "b"] * 5  # 2 warm-up rounds, then 3 timed rounds, interleaved
    assert out == {"a": 2.0, "b": 20.0}  # medians of the timed calls only


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(fns={}), ValueError, r"len\(fns\) must be an int >= 1, got 0"),
        (dict(fns=[lambda: None]), TypeError, "fns must be a dict of name -> callable, got list"),
        (dict(fns={"a": 3}), TypeError, r"fns\['a'\] must be a zero-argument callable, got int 3"),
        (dict(fns={"a": lambda: None}, repeats=0), ValueError, r"repeats must be an int >= 1 \(timed rounds\), got 0"),
        (dict(fns={"a": lambda: None}, repeats=2.0), TypeError, "repeats must be an int >= 1"),
        (dict(fns={"a": lambda: None}, warmup=-1), ValueError, r"warmup must be an int >= 0 .*got -1"),
    ],
)
def test_bad_arguments_raise_errors_naming_them(kwargs, err, match):
    with pytest.raises(err, match=match):
        timing.interleaved_medians(**kwargs)


def _scripted(clock, seconds):
    it = iter(seconds)

    def fn():
        clock.now += next(it)

    return fn


def test_ratio_with_interval_pairs_rounds_and_bounds_the_median_by_order_statistics(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing, "_clock", clock)
    # b always 1 s; a's timed calls give ratios 1..9 (after two warm-up calls), in a shuffled order
    a = _scripted(clock, [0, 0, 5, 1, 9, 3, 7, 2, 8, 4, 6])
    b = _scripted(clock, [0, 0] + [1.0] * 9)
    r = timing.ratio_with_interval(a, b, repeats=9, warmup=2)
    assert r.ratio == 5 and r.rounds == 9
    # sign test, n = 9: P(Binomial(9, 1/2) <= 1) = 10/512, so the 2nd and 8th smallest bound the median at 96%
    assert (r.low, r.high) == (2, 8)
    assert r.verdict() == "slower" and r.excludes_one()


def test_median_interval_ranks_cover_at_least_the_confidence_and_are_the_narrowest_that_do():
    from math import comb

    def coverage(n, k):  # P(x_(k) <= median <= x_(n-k+1)) for 1-based rank k, by the sign test
        return 1 - 2 * sum(comb(n, i) for i in range(k)) / 2**n

    for n in range(1, 40):
        lo, hi = timing.median_interval_ranks(n, 0.95)
        if n <= 5:  # even min..max covers only 1 - 2 / 2**n < 95%: the whole range is returned
            assert (lo, hi) == (0, n - 1)
            continue
        k = lo + 1
        assert hi == n - k and coverage(n, k) >= 0.95 and (k >= n // 2 or coverage(n, k + 1) < 0.95)


def test_every_interval_the_library_can_print_states_its_true_coverage():
    """Each rank pair ``ratio_from_times`` can use (every number of rounds up to 60) against the binomial law as
    torch computes it: the coverage printed is P(lo < N <= hi) for N ~ Binomial(n, 1/2), never the level asked."""
    for n in range(1, 61):
        lo, hi = timing.median_interval_ranks(n)
        counts = torch.arange(n + 1, dtype=torch.float64)
        pmf = torch.distributions.Binomial(n, torch.tensor(0.5, dtype=torch.float64)).log_prob(counts).exp()
        expected = float(pmf[lo + 1 : hi + 1].sum())
        assert timing.rank_coverage(n, lo, hi) == pytest.approx(expected, abs=1e-12), n
        assert timing.interval_coverage(n) == pytest.approx(expected, abs=1e-12), n
        values = [float((7 * i) % (n + 3)) for i in range(n)]  # unsorted, with repeats
        assert timing.median_interval(values) == (sorted(values)[lo], sorted(values)[hi]), n
        r = timing.ratio_from_times([float(i + 1) for i in range(n)], [1.0] * n)
        assert r.coverage == pytest.approx(expected, abs=1e-12) and f"{r.coverage:.1%} interval over {n} rounds" in str(
            r
        )
        assert expected >= timing.CONFIDENCE or (lo, hi) == (0, n - 1), n  # below the level only as min..max
    assert str(timing.ratio_from_times([1.0, 2, 3, 4, 5], [1.0] * 5)).endswith(
        "(1.00-5.00, 93.8% interval over 5 rounds)"
    )
    assert str(timing.ratio_from_times([float(i) for i in range(1, 10)], [1.0] * 9)).endswith(
        "96.1% interval over 9 rounds)"
    )
    with pytest.raises(ValueError, match=r"lo must be an int in \[0, 2\] \(a 0-based rank, at most hi\), got 3"):
        timing.rank_coverage(5, 3, 2)
    with pytest.raises(ValueError, match=r"hi must be an int <= 4 \(a 0-based rank among n = 5 samples\), got 5"):
        timing.rank_coverage(5, 0, 5)


def test_ratio_verdicts_and_printing():
    within = timing.ratio_from_times([1.0, 1.2, 0.9], [1.0, 1.0, 1.0])
    assert within.verdict() == "within_noise" and not within.excludes_one()
    faster = timing.ratio_from_times([0.5, 0.6, 0.4], [1.0, 1.0, 1.0])
    assert faster.verdict() == "faster"
    assert str(faster).startswith("0.50x (0.40-0.60")
    with pytest.raises(ValueError, match=r"len\(times_b\) must be 1 \(paired with times_a, round by round\), got 2"):
        timing.ratio_from_times([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"min\(times_b\) must be a finite number > 0 .*got 0.0"):
        timing.ratio_from_times([1.0], [0.0])
    with pytest.raises(ValueError, match=r"len\(times\) must be an int >= 1"):
        timing.median_with_range([])
    assert timing.median_with_spread([0.010, 0.012, 0.011]) == "11 ms (10-12 ms over 3 runs)"
    assert timing.median_with_range([0.010, 0.012, 0.011]) == "11 ms (10-12)"
    assert faster.short() == "0.50x (0.40-0.60)" and timing.interval_note(3) == "75.0% interval over 3 rounds"

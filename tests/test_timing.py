"""transformer_lib.timing: round-robin order, warm-up, medians (with a fake clock, no real timing)."""
import pytest

from transformer_lib import timing


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


@pytest.mark.parametrize("kwargs, match", [
    (dict(fns={}), "non-empty dict"),
    (dict(fns={"a": 3}), "callable"),
    (dict(fns={"a": lambda: None}, repeats=0), "repeats"),
    (dict(fns={"a": lambda: None}, warmup=-1), "warmup"),
])
def test_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        timing.interleaved_medians(**kwargs)

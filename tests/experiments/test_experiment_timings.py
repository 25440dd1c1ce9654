"""The timing experiments (pruning_speed): what they time and how they turn medians
into rates, with a stub timer (no real timing in tests)."""

import torch

from transformer_lib import GPT, GPTConfig
from transformer_lib.experiments import pruning_speed


def _stub_timer(monkeypatch, seconds):
    """Replace the round-robin timer: run every function once, return fixed seconds by the key's last part."""
    ran = []

    def stub(fns, repeats, warmup=2, device=None):
        out = {}
        for key, fn in fns.items():
            ran.append((key, fn()))
            out[key] = seconds[key[-1] if isinstance(key, tuple) else key]
        return out

    monkeypatch.setattr(pruning_speed, "interleaved_medians", stub)
    return ran


def test_pruned_speeds_turn_medians_into_tokens_per_second_and_apply_the_mask(monkeypatch):
    ran = _stub_timer(monkeypatch, {"fwd": 0.5, "dec": 2.0})
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=16, n_layers=1, n_heads=2, d_model=8, dropout=0.0)).eval()
    batch, prompt = torch.randint(0, 11, (3, 5)), torch.randint(0, 11, (1, 2))
    mask = torch.tensor([[1.0, 0.0]])  # the second head off
    speeds = pruning_speed.pruned_speeds({"full": (model, None), "masked": (model, mask)}, prompt, batch, new_tokens=4)
    assert speeds == {"full": (15 / 0.5, 4 / 2.0), "masked": (15 / 0.5, 4 / 2.0)}
    outputs = dict(ran)
    assert outputs["masked", "dec"].shape == (1, 6)  # prompt + 4 greedy tokens
    assert not torch.equal(outputs["full", "fwd"][0], outputs["masked", "fwd"][0])  # the mask was on


def test_csr_vs_dense_multiplies_the_same_sparsified_matrix_both_ways(monkeypatch):
    ran = _stub_timer(monkeypatch, {"dense": 1e-3, "csr": 4e-3})
    w, x = torch.randn(6, 10), torch.randn(10, 3)
    rows = pruning_speed.csr_vs_dense(w, x, (0.5, 0.9))
    assert rows == [(0.5, 1e-3, 4e-3), (0.9, 1e-3, 4e-3)]
    for (_, dense), (_, csr), s in zip(ran[0::2], ran[1::2], (0.5, 0.9)):
        torch.testing.assert_close(csr, dense)
        kept = w * (w.abs() > w.abs().flatten().quantile(s))
        torch.testing.assert_close(dense, kept @ x)


def _stub_rounds(monkeypatch, seconds):
    """Replace interleaved_times: run every function once and return, per key, the rounds given by its last part."""
    ran = []

    def stub(fns, repeats, warmup=2, device=None):
        out = {}
        for key, fn in fns.items():
            ran.append((key, fn()))
            out[key] = list(seconds[key[-1] if isinstance(key, tuple) else key])
        return out

    monkeypatch.setattr(pruning_speed, "interleaved_times", stub)
    return ran


def test_pruned_times_keep_every_round_and_apply_the_mask(monkeypatch):
    ran = _stub_rounds(monkeypatch, {"fwd": [0.5, 0.6, 0.4], "dec": [2.0, 2.1, 1.9]})
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=16, n_layers=1, n_heads=2, d_model=8, dropout=0.0)).eval()
    batch, prompt = torch.randint(0, 11, (3, 5)), torch.randint(0, 11, (1, 2))
    mask = torch.tensor([[1.0, 0.0]])
    times = pruning_speed.pruned_times({"full": (model, None), "masked": (model, mask)}, prompt, batch, new_tokens=4)
    assert times == {name: {"fwd": [0.5, 0.6, 0.4], "dec": [2.0, 2.1, 1.9]} for name in ("full", "masked")}
    outputs = dict(ran)
    assert outputs["masked", "dec"].shape == (1, 6)
    assert not torch.equal(outputs["full", "fwd"][0], outputs["masked", "fwd"][0])


def test_speed_ratio_is_the_median_of_reference_over_variant_and_its_verdict_follows_the_interval():
    ref = [1.0] * 9
    twice_as_fast = pruning_speed.speed_ratio([0.5] * 9, ref)
    assert twice_as_fast.ratio == 2.0 and pruning_speed.speed_verdict(twice_as_fast) == "faster"
    assert pruning_speed.speed_verdict(pruning_speed.speed_ratio([2.0] * 9, ref)) == "slower"
    mixed = pruning_speed.speed_ratio([0.5, 2.0] * 4 + [1.0], ref)  # ratios straddle 1: no verdict
    assert mixed.low < 1 < mixed.high and pruning_speed.speed_verdict(mixed) == "within_noise"


def test_csr_dense_times_multiply_the_same_sparsified_matrix_both_ways(monkeypatch):
    ran = _stub_rounds(monkeypatch, {"dense": [1e-3, 2e-3], "csr": [4e-3, 5e-3]})
    w, x = torch.randn(6, 10), torch.randn(10, 3)
    rows = pruning_speed.csr_dense_times(w, x, (0.5, 0.9), calls=3)
    assert rows == [(0.5, [1e-3, 2e-3], [4e-3, 5e-3]), (0.9, [1e-3, 2e-3], [4e-3, 5e-3])]
    for (_, dense), (_, csr), s in zip(ran[0::2], ran[1::2], (0.5, 0.9)):
        assert len(dense) == len(csr) == 3  # each timing runs the product `calls` times
        torch.testing.assert_close(csr, dense)
        torch.testing.assert_close(dense[0], (w * (w.abs() > w.abs().flatten().quantile(s))) @ x)

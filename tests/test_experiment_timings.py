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

"""Chapter 12's two objectives (``experiments.pretraining``): the evaluations read only what they claim to read,
and count exact characters. The record of the trained models is checked in ``test_fine_tuning.py``."""

import pytest
import torch

from transformer_lib.experiments import pretraining as P


def test_fill_a_blank_reads_both_sides_only_for_mlm():
    """Changing the characters right of the blank changes the MLM model's answer logits but never the causal one's,
    and the answer itself is never visible to either model."""
    torch.manual_seed(0)
    windows = P.held_out_windows(n=16)
    p = windows.shape[1] // 2
    cfg = P.ObjectiveConfig()
    mlm, causal = P.make_lm("mlm", cfg).eval(), P.make_lm("next-token", cfg).eval()
    changed = windows.clone()
    changed[:, p + 1 :] = torch.randint(0, P.mask_id(), changed[:, p + 1 :].shape)
    answer_changed = windows.clone()
    answer_changed[:, p] = (windows[:, p] + 1) % P.mask_id()
    with torch.no_grad():

        def mlm_logits(w):
            x = w.clone()
            x[:, p] = P.mask_id()
            return mlm(x)[0][:, p]

        assert not torch.allclose(mlm_logits(windows), mlm_logits(changed))
        torch.testing.assert_close(mlm_logits(windows), mlm_logits(answer_changed), atol=0, rtol=0)

        def left(w):
            return causal(w[:, :p])[0][:, -1]

        torch.testing.assert_close(left(windows), left(changed), atol=0, rtol=0)
        torch.testing.assert_close(left(windows), left(answer_changed), atol=0, rtol=0)


def test_accuracies_count_exact_characters():
    """A model that always answers the true character scores 1, one that never does scores 0."""
    windows = P.held_out_windows(n=8)

    class Oracle(torch.nn.Module):
        def __init__(self, target_at):
            super().__init__()
            self.target_at, self.w = target_at, torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            logits = torch.zeros(x.shape[0], x.shape[1], P.mask_id() + 1)
            logits[torch.arange(x.shape[0]), -1, self.target_at] = 1.0
            logits[torch.arange(x.shape[0]), windows.shape[1] // 2, self.target_at] = 1.0
            return logits, None

    assert P.next_accuracy(Oracle(windows[:, -1]), "next-token", windows) == 1.0
    assert P.next_accuracy(Oracle((windows[:, -1] + 1) % P.mask_id()), "mlm", windows) == 0.0
    assert P.blank_accuracy(Oracle(windows[:, windows.shape[1] // 2]), "mlm", windows) == 1.0


def test_an_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="objective"):
        P.make_lm("causal")

"""eval_mode: eval inside the block, every submodule's own mode restored after it, even after an exception."""
import pytest
import torch.nn as nn

from transformer_lib.modes import eval_mode


def _model():
    return nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1)))


@pytest.mark.parametrize("training", [True, False])
def test_eval_mode_switches_to_eval_and_restores_the_mode(training):
    model = _model().train(training)
    with eval_mode(model) as m:
        assert m is model and not any(sub.training for sub in model.modules())
    assert all(sub.training == training for sub in model.modules())


def test_eval_mode_restores_the_mode_after_an_exception():
    model = _model().train()
    with pytest.raises(RuntimeError, match="boom"):
        with eval_mode(model):
            raise RuntimeError("boom")
    assert all(sub.training for sub in model.modules())


def test_eval_mode_restores_mixed_modes_submodule_by_submodule():
    model = _model().train()
    model[2].eval()  # e.g. a frozen part kept in eval mode
    before = [sub.training for sub in model.modules()]
    with eval_mode(model):
        pass
    assert [sub.training for sub in model.modules()] == before


def test_eval_mode_rejects_a_non_module():
    with pytest.raises(TypeError, match="model must be an nn.Module, got list"):
        with eval_mode([]):
            pass

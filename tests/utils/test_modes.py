"""eval_mode: eval inside the block, every submodule's own mode restored after it, even after an exception."""

import pytest
import torch.nn as nn

from transformer_lib.utils.modes import eval_mode


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


# ----------------------------------------------------------------------------- the library's evaluators use it
def _gpt_in_training_mode():
    import torch

    from transformer_lib import GPT, GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=13, block_size=8, n_layers=1, n_heads=2, d_model=16, dropout=0.5)).train()


def _evaluators():
    import torch

    from transformer_lib.book_models.metrics import nats_per_char
    from transformer_lib.experiments.causal_leak import last_position_loss
    from transformer_lib.compression.pruning import head_importance
    from transformer_lib.quant import lm_quality
    from transformer_lib.training.loop import evaluate_loss

    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 13, (2, 8), generator=gen), torch.randint(0, 13, (2, 8), generator=gen))]
    return {
        "evaluate_loss": lambda m: evaluate_loss(m, batches),
        "nats_per_char": lambda m: nats_per_char(m, batches, torch.ones(13, dtype=torch.long)),
        "lm_quality": lambda m: lm_quality(m, batches)["loss"],
        "last_position_loss": lambda m: last_position_loss(m, batches),
        "head_importance": lambda m: head_importance(m, batches),
    }


@pytest.mark.parametrize(
    "name", ["evaluate_loss", "nats_per_char", "lm_quality", "last_position_loss", "head_importance"]
)
def test_evaluators_run_without_dropout_and_give_the_mode_back(name):
    import torch

    model = _gpt_in_training_mode()
    fn = _evaluators()[name]
    first, second = fn(model), fn(model)  # dropout 0.5 would make two runs differ
    assert model.training and all(m.training for m in model.modules())
    model.eval()
    reference = fn(model)
    for got in (first, second):
        torch.testing.assert_close(torch.as_tensor(got), torch.as_tensor(reference))

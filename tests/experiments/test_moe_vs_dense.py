"""Chapter 11's committed record (five seeds of dense and mixture models) is what its recipe produces, and the
committed seed-0 models are the ones the record measured."""

import dataclasses

import pytest
import torch

from transformer_lib.data.corpus import shakespeare_corpus
from transformer_lib.experiments import moe_vs_dense as X
from transformer_lib.training.loop import evaluate_loss


@pytest.fixture(scope="module")
def record():
    return X.load_record()


def test_record_configs_are_the_recipes(record):
    configs = X.pair_configs(shakespeare_corpus().tokenizer.vocab_size)
    assert record["configs"] == {name: dataclasses.asdict(cfg) for name, cfg in configs.items()}
    assert len(record["seeds"]) >= 3 and record["steps"] == X.RECIPE.steps


def test_pair_has_the_same_active_feed_forward_weights():
    configs = X.pair_configs(84)
    dense, moe = configs["dense"], configs["moe"]
    assert dense.d_ff * 1 == moe.d_ff * moe.top_k and moe.n_experts > moe.top_k
    assert configs["moe, no balancing"].aux_loss_coef == 0 < moe.aux_loss_coef
    with pytest.raises(
        ValueError, match=r"d_ff must be an int >= 1, a multiple of 2 \(experts of d_ff / top_k\), got 191"
    ):
        X.pair_configs(84, d_ff=191)


@pytest.mark.parametrize("name", ["dense", "moe", "moe, no balancing"])
def test_committed_models_are_the_ones_the_record_measured(record, name):
    model = X.load_trained(name)
    seed0 = record["seeds"].index(0)
    runs = record["runs"][name]
    assert abs(evaluate_loss(model, X.val_batches(), X.cross_entropy) - runs["val_loss"][seed0]) < 1e-4
    assert model.num_params() == runs["num_params"]
    curve = runs["train_loss_first_seed"]
    assert len(curve) == record["steps"] and curve[-1] < curve[0] - 1.0  # a training curve: falls from ~ln(vocab)
    if model.cfg.n_experts:
        load = X.expert_load(model, X.val_batches())
        assert torch.allclose(load, torch.tensor(runs["expert_load"][seed0]), atol=1e-6)
        assert torch.allclose(load.sum(1), torch.ones(load.shape[0]))


def test_load_trained_names_the_configs():
    with pytest.raises(ValueError, match="name must be one of"):
        X.load_trained("sparse")


def test_training_state_counts_sixteen_bytes_per_parameter():
    model = X.load_trained("moe")
    assert X.training_state_bytes(model) == 16 * model.num_params()


@pytest.mark.slow
def test_recipe_reproduces_the_record(record):
    seed0 = record["seeds"].index(0)
    rerun, models = X.run_seeds((0,), progress=False)
    for name, runs in record["runs"].items():
        assert abs(rerun["runs"][name]["val_loss"][0] - runs["val_loss"][seed0]) < 0.03, name
        assert set(models) == set(record["runs"])

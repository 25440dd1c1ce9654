"""Chapter 11's committed record (five seeds of dense and mixture models) is what its recipe produces, and the
committed seed-0 mixture is the model the record measured."""
import dataclasses

import pytest
import torch

from transformer_lib.corpus import shakespeare_corpus
from transformer_lib.experiments import moe_vs_dense as X
from transformer_lib.train import evaluate_loss


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
    with pytest.raises(ValueError, match="multiple of top_k"):
        X.pair_configs(84, d_ff=191)


def test_committed_mixture_is_the_one_the_record_measured(record):
    model = X.load_trained_moe()
    seed0 = record["seeds"].index(0)
    assert abs(evaluate_loss(model, X.val_batches(), X.cross_entropy) - record["runs"]["moe"]["val_loss"][seed0]) < 1e-4
    load = X.expert_load(model, X.val_batches())
    assert torch.allclose(load, torch.tensor(record["runs"]["moe"]["expert_load"][seed0]), atol=1e-6)
    assert torch.allclose(load.sum(1), torch.ones(load.shape[0]))


def test_training_state_counts_sixteen_bytes_per_parameter():
    model = X.load_trained_moe()
    assert X.training_state_bytes(model) == 16 * model.num_params()


@pytest.mark.slow
def test_recipe_reproduces_the_record(record):
    seed0 = record["seeds"].index(0)
    rerun, _ = X.run_seeds((0,), progress=False)
    for name, runs in record["runs"].items():
        assert abs(rerun["runs"][name]["val_loss"][0] - runs["val_loss"][seed0]) < 0.03, name

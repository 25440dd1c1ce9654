"""The length-extrapolation experiment of chapter 04: its task generator, its scoring, its training loop."""

import dataclasses
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from transformer_lib.experiments.extrapolation import (
    IGNORE,
    ExtrapolationConfig,
    accuracy_by_position,
    evaluate,
    lookback_batch,
    make_model,
    run_experiment,
    run_seeds,
    seed_summary,
    train,
)


@pytest.mark.parametrize("batch, length, vocab, offset", [(1, 2, 2, 1), (3, 17, 5, 4), (8, 64, 16, 1), (2, 9, 3, 8)])
def test_lookback_targets_are_the_token_offset_positions_back(batch, length, vocab, offset):
    idx, targets = lookback_batch(batch, length, vocab, offset, torch.Generator().manual_seed(0))
    assert idx.shape == targets.shape == (batch, length)
    assert idx.dtype == torch.long and 0 <= int(idx.min()) and int(idx.max()) < vocab
    for b in range(batch):
        for t in range(length):
            want = IGNORE if t < offset else int(idx[b, t - offset])
            assert int(targets[b, t]) == want


def test_lookback_tokens_are_roughly_uniform():
    idx, _ = lookback_batch(64, 256, 8, 1, torch.Generator().manual_seed(1))
    counts = torch.bincount(idx.flatten(), minlength=8).double()
    expected = idx.numel() / 8
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 30  # 7 degrees of freedom: P(chi2 > 30) < 1e-4


def test_lookback_is_reproducible_with_a_generator():
    a = lookback_batch(4, 10, 6, 2, torch.Generator().manual_seed(5))
    b = lookback_batch(4, 10, 6, 2, torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize(
    "kwargs, name", [(dict(offset=0), "offset"), (dict(offset=10), "offset"), (dict(vocab_size=1), "vocab_size")]
)
def test_lookback_rejects_bad_arguments(kwargs, name):
    args = dict(batch_size=2, length=10, vocab_size=4, offset=1) | kwargs
    with pytest.raises(ValueError, match=name):
        lookback_batch(**args)


def test_config_rejects_offset_outside_the_training_length():
    with pytest.raises(ValueError, match="offset"):
        ExtrapolationConfig(offset=32, train_len=32)
    with pytest.raises(ValueError, match=r"eval_factors\[0\] must be an int >= 1, got 0"):
        ExtrapolationConfig(eval_factors=(0, 1))


def test_accuracy_by_position_matches_a_count():
    gen = torch.Generator().manual_seed(2)
    idx, targets = lookback_batch(50, 12, 4, 3, gen)
    perfect = accuracy_by_position(F.one_hot(targets.clamp_min(0), 4).float(), targets)
    assert torch.isnan(perfect[:3]).all() and torch.equal(perfect[3:], torch.ones(9, dtype=torch.float64))
    constant = torch.zeros(50, 12, 4)
    constant[..., 2] = 1.0  # always predicts class 2
    got = accuracy_by_position(constant, targets)
    want = [sum(int(targets[b, t]) == 2 for b in range(50)) / 50 for t in range(3, 12)]
    assert got[3:].tolist() == pytest.approx(want)


class Oracle(nn.Module):
    """Reads the answer off its input: logits peak at the token ``offset`` positions back."""

    def __init__(self, offset, vocab):
        super().__init__()
        self.offset, self.vocab = offset, vocab
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, idx, targets):
        prev = torch.roll(idx, self.offset, dims=1)
        logits = 20.0 * F.one_hot(prev, self.vocab).float() + self.dummy
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def test_evaluate_scores_an_oracle_perfectly_and_a_guesser_at_chance():
    cfg = ExtrapolationConfig(offset=2, train_len=8, eval_batches=3, batch_size=64)
    res = evaluate(Oracle(2, cfg.vocab_size), 24, cfg)
    assert res["accuracy"] == 1.0 and res["accuracy_beyond_train"] == 1.0
    assert res["loss"] < 1e-6 and res["by_position"].shape == (24,)

    class Uniform(Oracle):
        def forward(self, idx, targets):
            logits = torch.zeros(*idx.shape, self.vocab) + self.dummy
            return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)

    res = evaluate(Uniform(2, cfg.vocab_size), 24, cfg)
    assert res["loss"] == pytest.approx(math.log(cfg.vocab_size))


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope", "alibi", "none"])
def test_models_accept_four_times_the_training_length(positional):
    cfg = ExtrapolationConfig(train_len=8, d_model=16, n_heads=2, n_layers=1)
    model = make_model(positional, cfg, device="cpu")
    logits, _ = model(torch.zeros(1, 32, dtype=torch.long))
    assert logits.shape == (1, 32, cfg.vocab_size)


def test_learned_table_rows_beyond_the_training_length_never_change():
    cfg = ExtrapolationConfig(train_len=8, d_model=16, n_heads=2, n_layers=1, steps=5)
    model = make_model("learned", cfg, device="cpu")
    before = model.pos.weight.detach().clone()
    train(model, cfg, progress=False)
    after = model.pos.weight.detach()
    assert not torch.equal(after[:8], before[:8])
    assert torch.equal(after[8:], before[8:])


def test_sinusoidal_table_is_scaled_and_frozen():
    cfg = ExtrapolationConfig(train_len=8, d_model=16, n_heads=2, n_layers=1, steps=3, sinusoidal_scale=0.5)
    model = make_model("sinusoidal", cfg, device="cpu")
    pos = torch.arange(32, dtype=torch.float64)[:, None]
    angle = pos / 10000 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    want = 0.5 * torch.stack((angle.sin(), angle.cos()), -1).flatten(1)
    torch.testing.assert_close(model.pos.pe.double(), want, atol=1e-6, rtol=0)
    train(model, cfg, progress=False)
    torch.testing.assert_close(model.pos.pe.double(), want, atol=1e-6, rtol=0)


def test_training_learns_the_previous_token_task():
    """A short real run: the loss must fall well below chance (ln 16 = 2.77)."""
    cfg = ExtrapolationConfig(train_len=16, steps=120, n_layers=2)
    result = run_experiment(("alibi",), cfg, device="cpu", progress=False)["alibi"]
    assert set(result["eval"]) == {16, 32, 64}
    assert sum(result["losses"][-10:]) / 10 < 1.0 < math.log(16) < result["losses"][0] + 0.3


def test_evaluate_gives_the_training_mode_back():
    cfg = ExtrapolationConfig(train_len=8, eval_batches=1, batch_size=2)
    model = make_model("rope", cfg, device="cpu").train()
    evaluate(model, 8, cfg)
    assert model.training


def test_seed_summary_matches_statistics_module():
    import statistics

    fake = {s: {"rope": {"eval": {64: {"accuracy": a, "loss": 1.0}}}} for s, a in ((0, 0.25), (1, 0.5), (2, 0.9))}
    got = seed_summary(fake, 64)["rope"]
    assert got["mean"] == pytest.approx(statistics.mean([0.25, 0.5, 0.9]))
    assert got["std"] == pytest.approx(statistics.stdev([0.25, 0.5, 0.9]))
    assert (got["min"], got["max"]) == (0.25, 0.9)
    assert seed_summary({0: fake[0]}, 64)["rope"]["std"] == 0.0


def test_run_seeds_trains_each_seed_with_its_own_config():
    cfg = ExtrapolationConfig(steps=2, eval_batches=1, batch_size=4, train_len=8)
    runs = run_seeds(("alibi",), cfg, seeds=(3, 4), device="cpu", progress=False)
    assert set(runs) == {3, 4}
    w3, w4 = (runs[s]["alibi"]["model"].tok_emb.weight for s in (3, 4))
    assert not torch.equal(w3, w4)  # different seeds, different initialisations
    with pytest.raises(ValueError, match=r"seeds must hold at least 1 item\(s\), got 0"):
        run_seeds(("alibi",), cfg, seeds=())


# ----------------------------------------------------------------------------- the committed runs
def test_committed_runs_load_with_the_default_config_and_their_initial_tables():
    from transformer_lib.experiments import extrapolation

    runs = extrapolation.load_runs("cpu")
    assert runs["config"] == ExtrapolationConfig()
    assert list(runs["by_seed"]) == list(extrapolation.SEEDS)
    for seed, results in runs["by_seed"].items():
        assert list(results) == list(extrapolation.POSITIONALS)
        assert all(len(r["losses"]) == runs["config"].steps for r in results.values())
        # the recorded initial table is the one make_model draws for that seed (equal up to the CPU's randn kernel)
        init = extrapolation.make_model("learned", dataclasses.replace(runs["config"], seed=seed), "cpu").pos.weight
        assert torch.allclose(results["learned"]["initial_table"], init, atol=1e-5)
    assert len(runs["unscaled"]["losses"]) == runs["config"].steps


def test_save_and_load_round_trip(tmp_path):
    from transformer_lib.experiments import extrapolation

    cfg = ExtrapolationConfig(steps=2, train_len=8, eval_batches=1, batch_size=4)
    runs = extrapolation.train_runs(cfg, seeds=(0, 1), device="cpu", progress=False)
    extrapolation.save_runs(runs, tmp_path / "e")
    back = extrapolation.load_runs("cpu", tmp_path / "e")
    assert back["config"] == cfg
    for seed, results in runs["by_seed"].items():
        for name, r in results.items():
            got = back["by_seed"][seed][name]
            assert got["losses"] == r["losses"]
            assert got["eval"][cfg.train_len]["accuracy"] == pytest.approx(r["eval"][cfg.train_len]["accuracy"])


@pytest.mark.slow
def test_training_script_reproduces_the_chapters_claims():
    """Retrain the 16 models (about 70 s of CPU) and check chapter 04's claims on the retrained ones."""
    from transformer_lib.experiments import extrapolation

    check_chapter_claims(extrapolation.train_runs(progress=False, device="cpu"))


def check_chapter_claims(runs):
    """The conditions of chapter 04's claims about the trained models (section 5), on ``train_runs``'s output."""
    from transformer_lib.experiments import extrapolation

    by_seed, cfg = runs["by_seed"], runs["config"]
    first = next(iter(by_seed.values()))  # the figures show the first seed
    final = {n: sum(first[n]["losses"][-50:]) / 50 for n in extrapolation.POSITIONALS}
    unscaled = sum(runs["unscaled"]["losses"][-50:]) / 50
    beyond = extrapolation.seed_summary(by_seed, cfg.eval_lens[-1], "accuracy_beyond_train")
    at_train = extrapolation.seed_summary(by_seed, cfg.train_len)
    positioned = ("learned", "sinusoidal", "rope", "alibi")
    worst = max(final[n] for n in positioned)  # "bring the loss from chance to at most <worst>"
    assert worst < 0.25 * math.log(cfg.vocab_size) and final["none"] > 3 * worst
    assert unscaled > math.log(cfg.vocab_size) - 0.2
    assert beyond["alibi"]["min"] > 0.9 and all(
        beyond[n]["max"] < 0.5 for n in ("none", "learned", "sinusoidal", "rope")
    )
    assert beyond["learned"]["max"] < 2.5 / cfg.vocab_size and at_train["none"]["mean"] > 5 / cfg.vocab_size
    T = cfg.train_len
    for results in by_seed.values():  # none: accuracy falls with position, before T_train and after it
        p = results["none"]["eval"][cfg.eval_lens[-1]]["by_position"]
        assert p[1 : T // 2].mean() > p[T // 2 : T].mean() > p[T:].mean()
    rope = [r["rope"]["eval"][cfg.eval_lens[-1]]["by_position"] for r in by_seed.values()]
    assert min(p[T : T + 4].min().item() for p in rope) > 0.8  # RoPE keeps its accuracy a few positions past T_train
    assert sum(p[T + 8 :].mean().item() for p in rope) / len(rope) < 2.5 / cfg.vocab_size  # then about chance

"""Chapter 12's runs (``experiments.fine_tuning``): the committed record is what its recipe produces, the committed
heads and adapters are the ones the record measured, and the pieces the page relies on do what they say (the
objectives' evaluations read only what they claim to read; the methods train what they claim to train)."""

import dataclasses

import pytest
import torch

from transformer_lib.experiments import fine_tuning as X
from transformer_lib.lora import lora_layers
from transformer_lib.params import count_parameters
from transformer_lib.qlora import NF4Linear


@pytest.fixture(scope="module")
def runs():
    return X.load_runs()


@pytest.fixture(scope="module")
def data():
    return X.task()


def test_record_configs_are_the_recipes(runs):
    record = runs["record"]
    assert record["objective"] == dataclasses.asdict(X.ObjectiveConfig())
    assert record["fine_tune"] == dataclasses.asdict(X.FineTuneConfig())
    assert record["seeds"] == list(X.RunsConfig().seeds)
    assert set(record["results"]) == set(X.METHODS)
    assert all(len(by_seed) == len(record["seeds"]) for by_seed in record["results"].values())


def test_the_checkpoint_is_small():
    assert X.CHECKPOINT.with_suffix(".safetensors").stat().st_size < 4 * 2**20


# slow: three MiniLM encoders over the held-out set and the agreement lines (the longest test of make test, over 3
# minutes on a loaded machine); chapter 12's page, which make test runs, re-measures the same three committed models
# (their accuracy claimed against the record within 0.01, their agreement printed beside the record's), so the fast
# loop keeps that check and make test-all adds this one's tighter agreement bound
@pytest.mark.slow
def test_committed_models_are_the_ones_the_record_measured(runs, data):
    lines = X.forgetting_lines()
    for method in ("probe", "lora", "qlora"):
        rec = runs["record"]["results"][method]["0"]
        model = runs["models"][method]
        assert X.accuracy(model, data) == pytest.approx(rec["accuracy"], abs=0.01)
        assert X.forgetting(model.encoder, lines) == pytest.approx(rec["agreement"], abs=2e-3)
        assert count_parameters(model, trainable=True) == rec["trainable"]


def test_methods_train_what_they_say():
    cfg = X.FineTuneConfig()
    probe, full, lora, qlora = (X.build_model(m, 0, cfg) for m in X.METHODS)
    head = sum(p.numel() for p in probe.head.parameters())
    assert count_parameters(probe, trainable=True) == head == 384 * 4 + 4
    top = sum(p.numel() for layer in full.encoder.layers[-cfg.top_layers :] for p in layer.parameters())
    assert count_parameters(full, trainable=True) == top + head
    adapters = sum(cfg.r * (m.in_features + m.out_features) for m in lora_layers(lora.encoder).values())
    assert len(lora_layers(lora.encoder)) == 6 * len(X.TARGETS)
    assert count_parameters(lora, trainable=True) == count_parameters(qlora, trainable=True) == adapters + head
    assert all(isinstance(m.base, NF4Linear) for m in lora_layers(qlora.encoder).values())
    # a fresh adapter (B = 0) leaves the encoder as it was: same features as the probe's frozen encoder
    enc = X.encode(["So foul and fair a day I have not seen.", "Our revels now are ended."])
    with torch.no_grad():
        torch.testing.assert_close(lora.features(enc), probe.features(enc), atol=1e-5, rtol=1e-5)


def test_fill_a_blank_reads_both_sides_only_for_mlm():
    """Changing the characters right of the blank changes the MLM model's answer logits but never the causal one's,
    and the answer itself is never visible to either model."""
    torch.manual_seed(0)
    windows = X.held_out_windows(n=16)
    p = windows.shape[1] // 2
    cfg = X.ObjectiveConfig()
    mlm, causal = X.make_lm("mlm", cfg).eval(), X.make_lm("next-token", cfg).eval()
    changed = windows.clone()
    changed[:, p + 1 :] = torch.randint(0, X.mask_id(), changed[:, p + 1 :].shape)
    answer_changed = windows.clone()
    answer_changed[:, p] = (windows[:, p] + 1) % X.mask_id()
    with torch.no_grad():

        def mlm_logits(w):
            x = w.clone()
            x[:, p] = X.mask_id()
            return mlm(x)[0][:, p]

        assert not torch.allclose(mlm_logits(windows), mlm_logits(changed))
        torch.testing.assert_close(mlm_logits(windows), mlm_logits(answer_changed), atol=0, rtol=0)

        def left(w):
            return causal(w[:, :p])[0][:, -1]

        torch.testing.assert_close(left(windows), left(changed), atol=0, rtol=0)
        torch.testing.assert_close(left(windows), left(answer_changed), atol=0, rtol=0)


def test_accuracies_count_exact_characters():
    """A model that always answers the true character scores 1, one that never does scores 0."""
    windows = X.held_out_windows(n=8)

    class Oracle(torch.nn.Module):
        def __init__(self, target_at):
            super().__init__()
            self.target_at, self.w = target_at, torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            logits = torch.zeros(x.shape[0], x.shape[1], X.mask_id() + 1)
            logits[torch.arange(x.shape[0]), -1, self.target_at] = 1.0
            logits[torch.arange(x.shape[0]), windows.shape[1] // 2, self.target_at] = 1.0
            return logits, None

    assert X.next_accuracy(Oracle(windows[:, -1]), "next-token", windows) == 1.0
    assert X.next_accuracy(Oracle((windows[:, -1] + 1) % X.mask_id()), "mlm", windows) == 0.0
    assert X.blank_accuracy(Oracle(windows[:, windows.shape[1] // 2]), "mlm", windows) == 1.0


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="objective"):
        X.make_lm("causal")
    with pytest.raises(ValueError, match="method"):
        X.build_model("prefix-tuning")


@pytest.mark.slow
def test_recipe_reproduces_the_record(runs, data):
    """Retrains seed 0's LoRA and the next-token model (about a minute of CPU) and compares with the record."""
    record = runs["record"]
    lines = X.forgetting_lines()
    original = X.embeddings(X.load_minilm(device="cpu")[0], lines)
    got, _ = X.run_one("lora", 0, X.FineTuneConfig(**record["fine_tune"]), data, lines, original, progress=False)
    want = record["results"]["lora"]["0"]
    assert got["trainable"] == want["trainable"]
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=0.03)
    assert got["agreement"] == pytest.approx(want["agreement"], abs=0.01)
    assert got["final_loss"] == pytest.approx(want["final_loss"], abs=0.05)
    _, hist = X.train_objective("next-token", X.ObjectiveConfig(**record["objective"]), progress=False)
    assert hist.val_loss[-1] == pytest.approx(record["lm_histories"]["next-token"]["val_loss"][-1], abs=0.02)

"""Chapter 12's runs (``experiments.fine_tuning``): the committed record is what its recipe produces, the committed
heads and adapters are the ones the record measured, and the pieces the page relies on do what they say (the
objectives' evaluations read only what they claim to read; the methods train what they claim to train)."""

import dataclasses

import pytest
import torch

from transformer_lib.experiments import fine_tuning as X
from transformer_lib.experiments import pretraining as P
from transformer_lib.training.lora import lora_layers
from transformer_lib.utils.params import count_parameters
from transformer_lib.training.qlora import NF4Linear


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
    """Two tiny language models, three heads, two sets of adapters and the top layers' change in int8 (3.4 MB of
    the 6.5 MiB; 14 MB in float32)."""
    assert X.CHECKPOINT.with_suffix(".safetensors").stat().st_size < 7 * 2**20


def test_the_top_layers_change_round_trips_within_its_int8_step():
    """``kept_tensors`` stores trained minus MiniLM's weights as int8 with a scale per row; ``add_weight_delta``
    gives back each weight within half a step of that row's grid, and leaves every other tensor alone."""
    torch.manual_seed(0)
    model = X.build_model("full", 0)
    with torch.no_grad():
        for p in model.encoder.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 1e-3)
    kept = X.kept_tensors(model, "full")
    fresh = X.build_model("full", 0)
    X.add_weight_delta(fresh, {k: v for k, v in kept.items() if k.endswith((".q", ".scale"))})
    trained, back = dict(model.encoder.named_parameters()), dict(fresh.encoder.named_parameters())
    for name, p in trained.items():
        if p.requires_grad:
            step = kept[f"encoder.{name}.scale"].reshape(-1, 1) if p.dim() == 2 else kept[f"encoder.{name}.scale"]
            assert kept[f"encoder.{name}.q"].dtype == torch.int8
            assert ((back[name] - p).abs() <= step / 2 + 1e-6).all(), name
        else:
            assert torch.equal(back[name], p), name
    with pytest.raises(
        ValueError,
        match=r"weight changes that name no tensor of the encoder must be empty, got 1, e.g. \['encoder.nope.q'\]",
    ):
        X.add_weight_delta(
            fresh, {"encoder.nope.q": torch.zeros(1, dtype=torch.int8), "encoder.nope.scale": torch.ones(1, 1)}
        )


# slow: three MiniLM encoders over the held-out set and the agreement lines (the longest test of make test, over 3
# minutes on a loaded machine); chapter 12's page, which make test runs, re-measures the same three committed models
# (their accuracy claimed against the record within 0.01, their agreement printed beside the record's), so the fast
# loop keeps that check and make test-all adds this one's tighter agreement bound
@pytest.mark.slow
def test_committed_models_are_the_ones_the_record_measured(runs, data):
    lines = X.forgetting_lines()
    for method in X.METHODS:
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


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="method"):
        X.build_model("prefix-tuning")


@pytest.mark.slow
def test_recipe_reproduces_the_record(runs, data):
    """Retrains seed 0's LoRA, its top-layer fine-tuning and the next-token model (about two minutes of CPU) and
    compares with the record; the retrained top layers are the committed ones, within their int8 step."""
    record = runs["record"]
    lines = X.forgetting_lines()
    original = X.embeddings(X.load_minilm(device="cpu")[0], lines)
    cfg = X.FineTuneConfig(**record["fine_tune"])
    for method in ("lora", "full"):
        got, model = X.run_one(method, 0, cfg, data, lines, original, progress=False)
        want = record["results"][method]["0"]
        assert got["trainable"] == want["trainable"]
        assert got["accuracy"] == pytest.approx(want["accuracy"], abs=0.03)
        assert got["agreement"] == pytest.approx(want["agreement"], abs=0.01)
        assert got["final_loss"] == pytest.approx(want["final_loss"], abs=0.05)
    committed, minilm = dict(runs["models"]["full"].encoder.named_parameters()), X.load_minilm(device="cpu")[0]
    # the retrained change against the committed one, relative to the change: int8 storage alone is ~1%;
    # retrained on an AVX2 machine (the record's was AVX-512), layer 5's qkv bias was 5.2% apart, over the 5% this
    # test first allowed: 15% leaves margin for another CPU's arithmetic
    off = {}
    with torch.no_grad():  # float() of a tensor that requires grad warns
        for name, p in model.encoder.named_parameters():
            change = (p - minilm.state_dict()[name]).norm()
            if change > 0:
                off[name] = float((committed[name] - p).norm() / change)
    assert off and max(off.values()) <= 0.15, sorted(off.items(), key=lambda kv: -kv[1])[:5]
    _, hist = P.train_objective("next-token", P.ObjectiveConfig(**record["objective"]), progress=False)
    assert hist.val_loss[-1] == pytest.approx(record["lm_histories"]["next-token"]["val_loss"][-1], abs=0.02)

"""The training loop: schedule, optimizer choice, determinism, budgets, clipping, non-finite losses."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.data.corpus import get_batch
from transformer_lib.data.dates import date_tokenizers, translation_batch
from transformer_lib.training.losses import gpt_loss, seq2seq_loss
from transformer_lib.models.configs import GPTConfig, TransformerConfig
from transformer_lib.models.transformer import GPT, Transformer
from transformer_lib.data.tokenization import CharTokenizer
from transformer_lib.training.loop import TrainConfig, evaluate_loss, lr_at, make_optimizer, train

TEXT = "to be, or not to be, that is the question. " * 40


def _tiny_gpt(seed=0, vocab=20):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, block_size=16, n_layers=1, n_heads=2, d_model=32))


def _tiny_translator(seed=0, src_vocab=30, tgt_vocab=14):
    torch.manual_seed(seed)
    return Transformer(
        TransformerConfig(
            src_vocab,
            tgt_vocab,
            d_model=32,
            n_heads=2,
            d_ff=64,
            n_encoder_layers=1,
            n_decoder_layers=1,
            dropout=0.0,
            max_len=64,
        )
    ).eval()


def _text_run(steps=60, seed=0, **kw):
    tok = CharTokenizer.from_text(TEXT)
    data = tok.encode_tensor(TEXT)
    model = _tiny_gpt(seed, tok.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    cfg = TrainConfig(steps=steps, lr=3e-3, warmup_steps=10, eval_every=20, seed=seed, progress=False, **kw)
    val = [get_batch(data, 16, 8, torch.Generator().manual_seed(99))]
    hist = train(
        model,
        lambda step: get_batch(data, 16, 8, gen),
        cfg,
        gpt_loss,
        eval_fn=lambda m: evaluate_loss(m, val),
        device="cpu",
    )
    return model, hist


# ----------------------------------------------------------------------------- schedule and loop
def test_lr_schedule_is_linear_warmup_then_torch_cosine_annealing():
    cfg = TrainConfig(steps=200, lr=1e-2, warmup_steps=20, min_lr_ratio=0.1)
    assert [lr_at(s, cfg) for s in range(3)] == pytest.approx([1e-2 / 20, 2e-2 / 20, 3e-2 / 20])
    # after warm-up: torch's CosineAnnealingLR from lr to eta_min over steps - warmup_steps
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=180, eta_min=1e-3)
    expected = []
    for _ in range(181):
        expected.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert [lr_at(s, cfg) for s in range(20, 201)] == pytest.approx(expected, rel=1e-6)


def test_training_lowers_the_loss_and_records_history():
    _, hist = _text_run()
    assert hist.steps_done == 60 and hist.stopped_by == "steps"
    assert len(hist.train_loss) == len(hist.lr) == 60
    assert hist.val_step == [20, 40, 60]
    assert hist.train_loss[0] > math.log(17) * 0.9  # starts near uniform over the 17 characters
    assert hist.val_loss[-1] < 0.6 * hist.train_loss[0]


def test_training_is_deterministic_on_cpu():
    m1, h1 = _text_run(steps=25)
    m2, h2 = _text_run(steps=25)
    assert h1.train_loss == h2.train_loss and h1.val_loss == h2.val_loss
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    _, h3 = _text_run(steps=25, seed=1)
    assert h3.train_loss != h1.train_loss


def test_wall_clock_budget_stops_the_run():
    _, hist = _text_run(steps=1000, max_seconds=1e-9)
    assert hist.stopped_by == "time" and hist.steps_done < 1000


def test_gradient_clipping_bounds_the_first_sgd_like_update():
    # with lr tiny and clip tiny, AdamW's first step moves each weight by ~lr regardless; check the norm is clipped
    model = _tiny_gpt()
    x = torch.randint(0, 20, (4, 16))
    captured = []
    orig = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *a, **k):
        params = list(params)
        total = orig(params, max_norm, *a, **k)
        captured.append(
            (
                float(total),
                float(
                    torch.linalg.vector_norm(
                        torch.stack([torch.linalg.vector_norm(p.grad) for p in params if p.grad is not None])
                    )
                ),
                max_norm,
            )
        )
        return total

    torch.nn.utils.clip_grad_norm_ = spy
    try:
        train(model, lambda s: (x, x), TrainConfig(steps=2, grad_clip=1e-3, progress=False), device="cpu")
    finally:
        torch.nn.utils.clip_grad_norm_ = orig
    assert len(captured) == 2
    for before, after, max_norm in captured:
        assert before > max_norm and after == pytest.approx(max_norm, rel=1e-3)


def test_nan_loss_raises_instead_of_training_on():
    model = _tiny_gpt()
    x = torch.randint(0, 20, (2, 16))
    with pytest.raises(FloatingPointError, match="step 0"):
        train(
            model,
            lambda s: (x, x),
            TrainConfig(steps=3, progress=False),
            loss_fn=lambda m, b: gpt_loss(m, b) * float("nan"),
            device="cpu",
        )


def test_evaluate_loss_is_the_mean_cross_entropy_and_keeps_the_mode():
    model = _tiny_gpt().train()
    batches = [(torch.randint(0, 20, (3, 16)), torch.randint(0, 20, (3, 16))) for _ in range(2)]
    with torch.no_grad():
        ref = sum(F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()) for x, y in batches) / 2
    assert evaluate_loss(model, batches) == pytest.approx(float(ref), rel=1e-6)
    assert model.training


def test_constant_schedule_keeps_the_peak_after_warm_up():
    cfg = TrainConfig(steps=50, lr=2e-3, warmup_steps=4, schedule="constant")
    assert [lr_at(s, cfg) for s in range(6)] == pytest.approx([5e-4, 1e-3, 1.5e-3, 2e-3, 2e-3, 2e-3])
    assert lr_at(49, TrainConfig(steps=50, lr=2e-3, warmup_steps=0, schedule="constant")) == 2e-3


def test_adam_option_takes_the_same_steps_as_torch_adam():
    def fresh():
        torch.manual_seed(0)
        return GPT(GPTConfig(vocab_size=20, block_size=16, n_layers=1, n_heads=2, d_model=32, dropout=0.0))

    x = torch.randint(0, 20, (4, 16))
    ours, ref = fresh(), fresh()
    cfg = TrainConfig(
        steps=5,
        lr=1e-2,
        warmup_steps=0,
        schedule="constant",
        weight_decay=0.0,
        betas=(0.9, 0.999),
        grad_clip=None,
        optimizer="adam",
        progress=False,
    )
    assert isinstance(make_optimizer(ours, cfg), torch.optim.Adam)
    hist = train(ours, lambda s: (x, x), cfg, device="cpu")
    opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = gpt_loss(ref, (x, x))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert hist.train_loss == pytest.approx(losses, rel=1e-5)
    for (name, a), b in zip(ours.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_non_finite_loss_can_stop_the_run_quietly():
    model = _tiny_gpt()
    x = torch.randint(0, 20, (2, 16))
    calls = []

    def loss_fn(m, b):
        calls.append(1)
        return gpt_loss(m, b) * (float("nan") if len(calls) == 4 else 1.0)

    hist = train(
        model,
        lambda s: (x, x),
        TrainConfig(steps=10, progress=False, on_nonfinite="stop"),
        loss_fn=loss_fn,
        eval_fn=lambda m: 1.0,
        device="cpu",
    )
    assert hist.stopped_by == "nonfinite" and hist.steps_done == 3 and len(hist.train_loss) == 3
    assert hist.val_step == []  # a diverged run is not evaluated
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the NaN step updated nothing


@pytest.mark.parametrize("field, value", [("optimizer", "sgd"), ("schedule", "linear"), ("on_nonfinite", "ignore")])
def test_config_rejects_unknown_choices(field, value):
    with pytest.raises(ValueError, match=f"{field} must be one of"):
        TrainConfig(**{field: value})


def test_eval_fn_runs_in_eval_mode_and_training_resumes_in_train_mode():
    model = _tiny_gpt()
    x = torch.randint(0, 20, (2, 16))
    seen = []

    def loss_fn(m, b):
        seen.append(("loss", m.training))
        return gpt_loss(m, b)

    train(
        model,
        lambda s: (x, x),
        TrainConfig(steps=4, eval_every=2, progress=False),
        loss_fn=loss_fn,
        eval_fn=lambda m: seen.append(("eval", m.training)) or 0.0,
        device="cpu",
    )
    assert seen == [("loss", True), ("loss", True), ("eval", False), ("loss", True), ("loss", True), ("eval", False)]
    assert not model.training  # train() leaves the model in eval mode


def test_seq2seq_loss_ignores_padding():
    src_tok, tgt_tok = date_tokenizers()
    model = _tiny_translator(src_vocab=src_tok.vocab_size, tgt_vocab=tgt_tok.vocab_size)
    pairs = [("3/3/87", "1987-03-03"), ("May 4, 1960", "1960-05-04")]
    both = seq2seq_loss(model, translation_batch(pairs, src_tok, tgt_tok))
    one = [seq2seq_loss(model, translation_batch([p], src_tok, tgt_tok)) for p in pairs]
    # equal target lengths: the batch loss is the mean of the single-pair losses
    assert float(both.detach()) == pytest.approx(float(sum(one).detach() / 2), rel=1e-5)


def test_the_progress_bar_shows_its_last_step_before_it_closes(monkeypatch):
    """tqdm rate-limits its display: a bar closed right after its last update kept "141/150" in a built page."""
    import tqdm.auto

    shown = []

    class Recording:
        def __init__(self, total, **kw):
            self.total, self.n, self.displayed = total, 0, 0

        def update(self, k):
            self.n += k  # like tqdm, the display lags behind n

        def set_postfix(self, **kw):
            pass

        def refresh(self):
            self.displayed = self.n

        def close(self):
            shown.append((self.displayed, self.total))

    monkeypatch.setattr(tqdm.auto, "tqdm", Recording)
    tok = CharTokenizer.from_text(TEXT)
    data = tok.encode_tensor(TEXT)
    gen = torch.Generator().manual_seed(0)
    train(
        _tiny_gpt(0, tok.vocab_size),
        lambda step: get_batch(data, 4, 8, gen),
        TrainConfig(steps=7, lr=1e-3),
        gpt_loss,
        device="cpu",
    )
    assert shown == [(7, 7)]


@pytest.mark.parametrize("grad_clip", [-1.0, 0.0, float("nan"), float("inf")])
def test_grad_clip_must_be_a_positive_norm_or_none(grad_clip):
    with pytest.raises(ValueError, match=r"grad_clip must be a finite number > 0 .*or None \(no clipping\), got"):
        TrainConfig(grad_clip=grad_clip)
    assert TrainConfig(grad_clip=None).grad_clip is None


@pytest.mark.parametrize("lr", [float("nan"), float("inf"), 0.0, -1e-3])
def test_a_learning_rate_that_is_not_a_positive_finite_number_is_refused(lr):
    with pytest.raises(ValueError, match=r"lr must be a finite number > 0"):
        TrainConfig(lr=lr)
    cfg = TrainConfig(steps=2, progress=False)
    cfg.lr = lr  # a config changed after construction is checked again by train
    model = _tiny_gpt()
    before = [p.clone() for p in model.parameters()]
    x = torch.randint(0, 20, (2, 8))
    with pytest.raises(ValueError, match=r"lr must be a finite number > 0 \(the peak learning rate\), got"):
        train(model, lambda s: (x, x), cfg, device="cpu")
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))

"""The chapter 05/06 experiment helpers, checked against closed forms and PyTorch built-ins,
and the architecture diagram checked against the modules it is drawn from."""

import math

import matplotlib
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

matplotlib.use("Agg")

import transformer_lib as tl  # noqa: E402
from transformer_lib.models import variants  # noqa: E402
from transformer_lib.data.dates import date_tokenizers  # noqa: E402
from transformer_lib.experiments import (
    causal_leak,
    cross_attention,
    mask_fill,
    norm_placement,  # noqa: E402
    padded_rows,
)
from transformer_lib.blocks.layers import LayerNorm, Residual  # noqa: E402
from transformer_lib.training.loop import evaluate_loss  # noqa: E402
from transformer_lib.viz.architecture import architecture_columns, plot_architecture  # noqa: E402


def tiny_gpt(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=20, block_size=16, n_layers=2, n_heads=2, d_model=16)
    cfg.update(kw)
    return tl.GPT(tl.GPTConfig(**cfg)).eval()


# ============================================================================= fill values (chapter 06)
def closed_form_masked_weight(allowed, n_masked, fill):
    """n e^f / (n e^f + sum e^s), evaluated stably in float64 with math only."""
    logs = [math.log(n_masked) + fill] + [float(s) for s in allowed]
    top = max(logs)
    total = sum(math.exp(v - top) for v in logs)
    return math.exp(logs[0] - top) / total


@pytest.mark.parametrize("level", [0.0, -5_000.0, -9_990.0, -10_000.0, -10_010.0, -15_000.0])
@pytest.mark.parametrize("n_masked", [1, 3])
def test_masked_weight_matches_the_closed_form(level, n_masked):
    allowed = torch.tensor([0.0, -1.0, 2.0]) + level
    got = mask_fill.masked_weight(allowed, n_masked, mask_fill.GPT2_OLD_FILL, torch.float64)
    assert got == pytest.approx(closed_form_masked_weight(allowed.tolist(), n_masked, -1e4), abs=1e-12)


def test_fixed_minus_1e4_lets_masked_keys_win_when_real_scores_are_lower():
    # real scores around -15,000 (as reported in karpathy/minGPT#75): the "masked" keys take all the weight
    assert mask_fill.masked_weight(torch.tensor([-15_000.0, -15_200.0]), 2, -1e4) == pytest.approx(1.0)
    assert mask_fill.masked_weight(torch.tensor([3.0, 1.0]), 2, -1e4) == 0.0  # ordinary scores: no leak


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_library_boolean_mask_gives_masked_keys_exactly_zero(dtype):
    allowed = torch.tensor([-15_000.0, -15_200.0]) if dtype != torch.float16 else torch.tensor([-60_000.0, -60_100.0])
    assert mask_fill.masked_weight(allowed, 2, None, dtype) == 0.0


def test_fp16_cannot_hold_minus_1e9():
    row = mask_fill.mask_fill_outcome(torch.float16, "-1e9", "replace")
    assert row["blocked score"].startswith("error")
    row = mask_fill.mask_fill_outcome(torch.float16, "-1e9", "add")  # cast first: -1e9 > 65504 in magnitude -> -inf
    assert row["blocked score"] == "-inf" and row["fully masked row"] == "NaN"
    assert row["weight on blocked keys"] == "0"


def test_bf16_rounds_minus_1e9_to_eight_significant_bits():
    row = mask_fill.mask_fill_outcome(torch.bfloat16, "-1e9", "replace")
    closed_form = -round(1e9 / 2**22) * 2**22  # 1e9 lies in [2^29, 2^30): spacing 2^(29-7) = 2^22
    assert float(row["blocked score"]) == pytest.approx(closed_form, rel=1e-4)
    assert row["fully masked row"] == "uniform (1/4 each)"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_minus_inf_gives_nan_on_fully_masked_rows(dtype):
    for how in ("replace", "add"):
        row = mask_fill.mask_fill_outcome(dtype, "-inf", how)
        assert row["fully masked row"] == "NaN" and row["weight on blocked keys"] == "0"


def test_finfo_min_plus_a_negative_score_overflows_in_fp16_only():
    # -65504 - 30 rounds beyond fp16's largest finite magnitude (65504, overflow threshold 65520) -> -inf
    assert torch.tensor(-65504.0 - 30.0).half().item() == float("-inf")
    fp16 = mask_fill.mask_fill_outcome(torch.float16, "finfo.min", "add")
    assert "-inf" in fp16["blocked score"].split(", ")
    fp32 = mask_fill.mask_fill_outcome(torch.float32, "finfo.min", "add")
    assert "-inf" not in fp32["blocked score"] and fp32["fully masked row"] == "uniform (1/4 each)"
    replace16 = mask_fill.mask_fill_outcome(torch.float16, "finfo.min", "replace")
    assert replace16["blocked score"] == "-6.55e+04" and replace16["fully masked row"] == "uniform (1/4 each)"


def test_partly_masked_row_agrees_with_a_softmax_over_kept_keys():
    s, keep = mask_fill.TABLE_SCORES[0], mask_fill.TABLE_KEEP[0]
    w = torch.softmax(mask_fill.apply_fill(s, keep, "finfo.min", "replace"), -1)
    assert torch.allclose(w[keep], torch.softmax(s[keep], -1)) and w[~keep].sum() == 0


def test_mask_fill_table_covers_every_combination():
    table = mask_fill.mask_fill_table()
    assert len(table) == 3 * 3 * 2
    assert {(r["dtype"], r["fill"], r["how"]) for r in table} == {
        (d, f, h) for d in ("float32", "float16", "bfloat16") for f in mask_fill.FILLS for h in ("replace", "add")
    }


def test_fill_arguments_are_checked():
    with pytest.raises(ValueError, match="fill must be one of"):
        mask_fill.fill_value("-1e4", torch.float32)
    with pytest.raises(ValueError, match=r"how must be one of \['add', 'replace'\], got 'multiply'"):
        mask_fill.apply_fill(torch.zeros(2), torch.ones(2, dtype=torch.bool), "-inf", "multiply")


# ============================================================================= padded query rows (chapter 06)
def test_padded_rows_experiment():
    rows = {r.variant: r for r in padded_rows.padded_rows_experiment(lengths=(6, 4), n_layers=2)}
    keys = rows["keys only (library)"]
    assert keys.nan_rows_layer0 == 0 and not keys.nan_real_outputs and not keys.nan_grad
    assert keys.real_diff < 1e-5  # padding changes nothing at the real positions
    inf = rows["keys + queries, -inf"]
    assert inf.nan_rows_layer0 == 2  # the two padded queries of sequence 2
    assert inf.nan_real_outputs and math.isnan(inf.loss)  # 0 * NaN = NaN: the second layer spreads it
    for name in ("keys + queries, finfo.min", "keys + queries (library)"):
        r = rows[name]
        assert r.nan_rows_layer0 == 0 and not r.nan_real_outputs and not r.nan_grad and r.real_diff < 1e-5
        assert r.loss == pytest.approx(keys.loss, abs=1e-6)  # padded targets are ignored by the loss


# ============================================================================= the causal mask (chapter 06)
def test_future_sensitivity_is_zero_before_the_change_with_the_mask():
    model = tiny_gpt()
    idx = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(0))
    diff = causal_leak.future_sensitivity(model, idx, position=5)
    assert diff.shape == (12,)
    assert torch.all(diff[:6] == 0) and torch.all(diff[6:] > 0)


def test_removing_the_causal_mask_leaks_and_can_be_undone():
    model = tiny_gpt()
    idx = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(0))
    before = model(idx)[0]
    variants.set_causal(model, False)
    assert not variants.is_causal(model)
    assert torch.all(causal_leak.future_sensitivity(model, idx, position=5)[:6] > 0)
    variants.set_causal(model, True)
    assert variants.is_causal(model) and torch.equal(model(idx)[0], before)


def test_unmasked_block_equals_torch_encoder_layer_style_full_attention():
    # independent check of "no mask": the block's attention equals F.scaled_dot_product_attention without a mask
    model = variants.set_causal(tiny_gpt(n_layers=1), False)
    block = model.blocks[0]
    x = torch.randn(1, 7, 16)
    h = block.res_self.norm(x)
    q, k, v = block.self_attn.project_qkv(h)
    attn = block.self_attn.out(block.self_attn.merge_heads(F.scaled_dot_product_attention(q, k, v)))
    x1 = x + attn
    want = x1 + block.ffn(block.res_ffn.norm(x1))
    assert torch.allclose(block(x), want, atol=1e-5)


def test_one_unmasked_layer_changes_every_position_but_the_last():
    # the last query sees every key with or without the mask; one layer deep nothing else differs for it
    model = tiny_gpt(n_layers=1)
    idx = torch.randint(0, 20, (2, 9))
    before = model(idx)[0]
    after = variants.set_causal(model, False)(idx)[0]
    assert torch.allclose(after[:, -1], before[:, -1], atol=1e-5)
    assert not torch.allclose(after[:, :-1], before[:, :-1], atol=1e-3)


def test_future_sensitivity_checks_position():
    with pytest.raises(
        ValueError, match=r"position must be an int in \[0, 3\] \(a position with a later one to change\), got 4"
    ):
        causal_leak.future_sensitivity(tiny_gpt(), torch.zeros(1, 5, dtype=torch.long), position=4)


def test_last_position_loss_is_the_cross_entropy_of_the_last_column():
    model = tiny_gpt()
    x = torch.randint(0, 20, (3, 10))
    y = torch.randint(0, 20, (3, 10))
    want = F.cross_entropy(model(x)[0][:, -1], y[:, -1]).item()
    assert causal_leak.last_position_loss(model, [(x, y)]) == pytest.approx(want, rel=1e-6)


def test_fit_text_cuts_long_runs_and_wraps_long_lines():
    text = "ROMEO:\n" + "I" * 161 + "\nshort line"
    fitted = causal_leak.fit_text(text)
    assert fitted == "ROMEO:\n" + "I" * 10 + "... (161 x 'I')\nshort line"
    assert causal_leak.fit_text("a" * 20) == "a" * 20  # a run of 2 * keep stays whole
    words = " ".join(["word"] * 60)  # 299 characters, no run: wrapped
    lines = causal_leak.fit_text(words).split("\n")
    assert max(map(len, lines)) <= 100 and " ".join(lines) == words


def test_train_char_gpt_with_and_without_mask():
    cfg = causal_leak.CausalConfig(
        n_layers=1, d_model=16, n_heads=2, block_size=16, batch_size=4, steps=3, warmup_steps=1, eval_batches=1
    )
    masked, hist = causal_leak.train_char_gpt(True, cfg, progress=False, device="cpu")
    unmasked, _ = causal_leak.train_char_gpt(False, cfg, progress=False, device="cpu")
    assert hist.steps_done == 3 and all(math.isfinite(v) for v in hist.val_loss)
    assert variants.is_causal(masked) and not variants.is_causal(unmasked)
    idx = torch.randint(0, masked.cfg.vocab_size, (1, 16))
    assert torch.all(causal_leak.future_sensitivity(masked, idx, 7)[:8] == 0)
    assert torch.all(causal_leak.future_sensitivity(unmasked, idx, 7)[:8] > 0)


def test_committed_causal_leak_runs_follow_the_config_and_load():
    runs = causal_leak.load_runs("cpu")
    cfg = causal_leak.CausalConfig()
    assert runs["cfg"] == cfg and list(runs["models"]) == list(causal_leak.NAMES.values())
    val = causal_leak.causal_val_batches(cfg)
    for causal, name in causal_leak.NAMES.items():
        model, hist = runs["models"][name], runs["histories"][name]
        assert not model.training and variants.is_causal(model) == causal
        assert hist.steps_done == cfg.steps and len(hist.train_loss) == cfg.steps and hist.val_step[-1] == cfg.steps
        assert all(math.isfinite(v) for v in hist.train_loss + hist.val_loss)
        # the weights are the trained ones: the loaded model scores on the validation windows what training recorded
        assert evaluate_loss(model, val) == pytest.approx(hist.val_loss[-1], abs=1e-4)
    fresh = causal_leak.make_model(True, cfg)
    assert not torch.equal(fresh.lm_head.weight, runs["models"]["with causal mask"].lm_head.weight)


def test_causal_leak_save_and_load_round_trip(tmp_path):
    cfg = causal_leak.CausalConfig(
        n_layers=1, d_model=16, n_heads=2, block_size=16, batch_size=4, steps=2, warmup_steps=1, eval_batches=1
    )
    runs = causal_leak.train_runs(cfg, progress=False, device="cpu")
    causal_leak.save_runs(runs, tmp_path / "c")
    back = causal_leak.load_runs("cpu", tmp_path / "c")
    assert back["cfg"] == cfg and back["histories"] == runs["histories"]
    for name, model in runs["models"].items():
        assert variants.is_causal(back["models"][name]) == variants.is_causal(model)
        for (key, a), b in zip(model.state_dict().items(), back["models"][name].state_dict().values()):
            assert torch.equal(a, b), key


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_causal_leak_training_reproduces_the_chapters_claims(seed):
    """Retrain both models (about 20 s of CPU) and check chapter 06's claims on them as the page does: the loss
    claims with the committed seed (0) and another, since a claim about a training outcome must not hang on one
    sample; the word-share claim with the committed seed (see below)."""
    from transformer_lib.data.corpus import shakespeare_corpus, shakespeare_split

    cfg = causal_leak.CausalConfig(seed=seed)
    models = causal_leak.train_runs(cfg, progress=False, device="cpu")["models"]
    masked, unmasked = models["with causal mask"], models["without causal mask"]
    val = causal_leak.causal_val_batches(cfg)
    # without the mask the validation loss falls below half the masked one; at the last position it is worse
    assert evaluate_loss(unmasked, val) < 0.5 * evaluate_loss(masked, val)
    assert causal_leak.last_position_loss(unmasked, val) > causal_leak.last_position_loss(masked, val)
    if seed != 0:
        # the word-share claim is checked on the committed seed only: with seed 1 the unmasked model's samples
        # scored 73% known words against the masked model's 68%, so that sentence hangs on the seed (reported)
        return
    vocabulary, tok = causal_leak.word_set(shakespeare_split()[0]), shakespeare_corpus().tokenizer
    share = {
        name: sum(
            causal_leak.known_word_share(t, vocabulary)
            for t in causal_leak.sample_texts(m, tok, "ROMEO:\nI", 160, seeds=range(3))
        )
        / 3
        for name, m in models.items()
    }
    assert share["with causal mask"] > share["without causal mask"] + 0.15  # far more real words


# ============================================================================= norm placement (chapter 05)
def _residuals(model):
    return [m for m in model.modules() if isinstance(m, Residual)]


def test_set_norm_placement_rewires_every_residual():
    post = variants.set_norm_placement(tiny_gpt(), "post")
    assert all(not r.norm_first for r in _residuals(post))
    none = variants.set_norm_placement(tiny_gpt(), "none")
    assert not any(isinstance(m, (LayerNorm, nn.LayerNorm)) for m in none.modules())
    pre = variants.set_norm_placement(tiny_gpt(), "pre")
    x = torch.randint(0, 20, (2, 8))
    assert torch.equal(pre(x)[0], tiny_gpt()(x)[0])  # the GPT default is pre-norm: nothing changes
    with pytest.raises(ValueError, match="placement must be one of"):
        variants.set_norm_placement(tiny_gpt(), "sandwich")


def test_post_norm_block_follows_the_paper_formula():
    block = variants.set_norm_placement(tiny_gpt(n_layers=1), "post").blocks[0]
    x = torch.randn(2, 5, 16)
    ln1, ln2 = (
        (lambda r: lambda h: F.layer_norm(h, (16,), r.norm.weight, r.norm.bias))(block.res_self),
        (lambda r: lambda h: F.layer_norm(h, (16,), r.norm.weight, r.norm.bias))(block.res_ffn),
    )
    a = ln1(x + block.self_attn(x, is_causal=True)[0])  # LN(x + Attn(x))
    want = ln2(a + block.ffn(a))  # LN(a + FFN(a))
    assert torch.allclose(block(x), want, atol=1e-5)


def test_gradient_norms_by_layer_match_autograd():
    model = tiny_gpt(n_layers=3)
    x, y = torch.randint(0, 20, (2, 8)), torch.randint(0, 20, (2, 8))
    got = norm_placement.gradient_norms_by_layer(model, x, y)
    loss = model(x, y)[1]
    grads = torch.autograd.grad(loss, [p for b in model.blocks for p in b.parameters()])
    sizes = [len(list(b.parameters())) for b in model.blocks]
    want, i = [], 0
    for n in sizes:
        want.append(torch.sqrt(sum((g**2).sum() for g in grads[i : i + n])))
        i += n
    assert got.shape == (3,) and torch.allclose(got, torch.stack(want), rtol=1e-5)
    assert all(p.grad is None for p in model.parameters())


def test_run_norm_placement_trains_and_reports_divergence_without_raising():
    cfg = norm_placement.NormConfig(
        n_layers=2, d_model=16, n_heads=2, block_size=8, batch_size=4, steps=4, eval_batches=1, lr=1e-3
    )
    run = norm_placement.run_norm_placement("post", 0, cfg, progress=False, device="cpu")
    assert len(run.losses) == 4 and not run.diverged and math.isfinite(run.val_loss)
    wild = norm_placement.NormConfig(**{**cfg.__dict__, "lr": 1e30, "steps": 6})
    run = norm_placement.run_norm_placement("none", 0, wild, progress=False, device="cpu")
    assert run.diverged and math.isnan(run.final_loss(2))


def test_summarize_runs_is_mean_and_sample_std():
    runs = [norm_placement.NormRun("pre", s, [5.0, 4.0, v], v + 0.1, False) for s, v in enumerate([2.0, 2.5, 3.5])]
    runs.append(norm_placement.NormRun("pre", 3, [5.0], float("nan"), True))
    summary = norm_placement.summarize_runs(runs, window=2)
    finals = torch.tensor([3.0, 3.25, 3.75], dtype=torch.float64)  # mean of the last two losses of each run
    mean, std = summary["final_loss"]
    assert mean == pytest.approx(finals.mean().item()) and std == pytest.approx(finals.std().item())
    assert summary["diverged"] == 1 and summary["runs"] == 4
    assert summary["largest_rise"] == (0.0, 0.0)  # every run only went down


# ============================================================================= cross-attention (chapter 05)
def test_cross_attention_maps_shapes_and_rows():
    src_tok, tgt_tok = date_tokenizers()
    torch.manual_seed(0)
    model = tl.Transformer(
        tl.TransformerConfig(
            src_tok.vocab_size,
            tgt_tok.vocab_size,
            d_model=16,
            n_heads=2,
            d_ff=32,
            n_encoder_layers=1,
            n_decoder_layers=2,
            dropout=0.0,
        )
    )
    text = "3 March 1987"
    src, out, w = cross_attention.cross_attention_maps(model, src_tok, tgt_tok, text, max_len=6)
    assert src == list(text) and 1 <= len(out) <= 6
    assert w.shape == (2, 2, len(out), len(text))
    assert torch.allclose(w.sum(-1), torch.ones(2, 2, len(out)), atol=1e-5)


# ============================================================================= architecture diagram (chapter 05)
def texts(col, part="layer"):
    return [b.text.split("\n")[0] for b in getattr(col, part)]


def test_architecture_of_a_post_norm_encoder_decoder():
    model = tl.Transformer(
        tl.TransformerConfig(30, 12, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=3, n_decoder_layers=2)
    )
    enc, dec = architecture_columns(model)
    assert texts(enc) == ["Self-attention", "Add & LayerNorm", "Feed-forward", "Add & LayerNorm"]
    assert texts(dec) == [
        "Masked self-attention",
        "Add & LayerNorm",
        "Cross-attention",
        "Add & LayerNorm",
        "Feed-forward",
        "Add & LayerNorm",
    ]
    assert (enc.n_layers, dec.n_layers) == (3, 2) and dec.cross_box == 2
    assert "4 heads x 8" in enc.layer[0].text and "32 -> 64 -> 32" in enc.layer[2].text
    assert not any("final" in b.text for b in enc.above + dec.above)  # post-norm: no final LayerNorm


def test_architecture_of_a_pre_norm_encoder_decoder_has_norms_first_and_a_final_norm():
    model = tl.Transformer(
        tl.TransformerConfig(
            30, 12, d_model=32, n_heads=4, d_ff=64, norm_first=True, n_encoder_layers=1, n_decoder_layers=1
        )
    )
    enc, dec = architecture_columns(model)
    assert texts(enc) == [
        "LayerNorm",
        "Self-attention",
        "Add (residual)",
        "LayerNorm",
        "Feed-forward",
        "Add (residual)",
    ]
    assert texts(dec, "above")[0] == "LayerNorm (final)" and dec.residuals == [(0, 2), (3, 5), (6, 8)]


def test_architecture_follows_the_modules_of_a_gpt_and_a_bert():
    gpt = tiny_gpt(n_layers=3)
    (col,) = architecture_columns(gpt)
    assert col.cross_box is None and col.n_layers == 3 and "Cross-attention" not in texts(col)
    assert "tied" in col.above[-1].text
    (none,) = architecture_columns(variants.set_norm_placement(tiny_gpt(), "none"))
    assert "LayerNorm" not in " ".join(texts(none) + texts(none, "above"))
    bert = tl.BertEncoder(tl.BertConfig(vocab_size=50, d_model=24, n_heads=3, d_ff=48, n_layers=2, max_len=16))
    (enc,) = architecture_columns(bert)
    assert texts(enc) == ["Self-attention", "Add & LayerNorm", "Feed-forward", "Add & LayerNorm"]


def test_plot_architecture_draws_every_box():
    model = tl.Transformer(
        tl.TransformerConfig(30, 12, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=1, n_decoder_layers=1)
    )
    fig = plot_architecture(model)
    drawn = [t.get_text() for t in fig.axes[0].texts]
    for col in architecture_columns(model):
        for box in col.below + col.layer + col.above:
            assert box.text in drawn
    assert (
        "memory\n(keys, values)" in drawn
        and f"{sum(p.numel() for p in model.parameters()):,}" in fig.axes[0].get_title()
    )


def test_plot_architecture_rejects_other_modules():
    with pytest.raises(TypeError, match="model must be a Transformer or a GPT or a BertEncoder, got Linear"):
        plot_architecture(nn.Linear(2, 2))


# ============================================================================= small measures
def test_unigram_entropy_closed_form():
    assert norm_placement.unigram_entropy(torch.tensor([0, 0, 1, 1]), 5) == pytest.approx(math.log(2))
    ids = torch.tensor([0, 1, 1, 2, 2, 2])
    p = [1 / 6, 2 / 6, 3 / 6]
    assert norm_placement.unigram_entropy(ids, 3) == pytest.approx(-sum(q * math.log(q) for q in p))


def test_moving_average_steps_below_and_largest_rise():
    losses = [5.0, 4.0, 3.0, 2.0, 3.0, 4.0, 1.0]
    want = torch.tensor([4.5, 3.5, 2.5, 2.5, 3.5, 2.5], dtype=torch.float64)
    assert torch.allclose(norm_placement.moving_average(losses, 2), want)
    assert norm_placement.steps_below(losses, 3.0, window=2) == 3  # mean of steps 2 and 3 is 2.5 < 3
    assert norm_placement.steps_below(losses, 1.0, window=2) is None
    assert norm_placement.largest_rise(losses, window=2) == pytest.approx(1.0)  # 3.5 after a best of 2.5
    assert norm_placement.largest_rise([3.0, 2.0, 1.0], window=1) == 0.0


def test_summarize_runs_reports_steps_below_a_level():
    runs = [
        norm_placement.NormRun("pre", 0, [3.0] * 5 + [1.0] * 15, 1.0, False),
        norm_placement.NormRun("pre", 1, [3.0] * 20, 3.0, False),
        norm_placement.NormRun("pre", 2, [3.0], float("nan"), True),
    ]
    # window of 10 ending at step 10 holds four 3.0s and six 1.0s: mean 1.8 < 2 (the one before: 2.0)
    assert norm_placement.summarize_runs(runs, level=2.0)["steps_below"] == [10, None, None]


def test_sequence_log_prob_matches_step_by_step_decoding():
    src_tok, tgt_tok = date_tokenizers()
    torch.manual_seed(0)
    model = tl.Transformer(
        tl.TransformerConfig(
            src_tok.vocab_size,
            tgt_tok.vocab_size,
            d_model=16,
            n_heads=2,
            d_ff=32,
            n_encoder_layers=1,
            n_decoder_layers=1,
            dropout=0.0,
        )
    ).eval()
    text, output = "3 March 1987", "1987-03"
    src = torch.tensor([src_tok.encode(text)])
    memory = model.encode(src)
    target = tgt_tok.encode(output) + [tgt_tok.eos_id]
    prefix, total = [tgt_tok.bos_id], 0.0
    with torch.no_grad():
        for token in target:  # one decoder call per step, reading only the last position
            logits = model.decode(torch.tensor([prefix]), memory)[0, -1]
            logits[[0, tgt_tok.bos_id]] = float("-inf")
            total += torch.log_softmax(logits, -1)[token].item()
            prefix.append(token)
    assert cross_attention.sequence_log_prob(model, src_tok, tgt_tok, text, output) == pytest.approx(total, abs=1e-4)

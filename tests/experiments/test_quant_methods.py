"""Chapter 09's measurements: RTN vs GPTQ vs AWQ (``experiments.quant_methods``) and memory from parameter counts
(``experiments.model_memory``), against direct recomputation (``F.cross_entropy``, cosines, a hand-made
quantized copy), the real parameter counts of the models we load, and closed-form byte counts."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lib import GPT, GPTConfig
from transformer_lib.experiments import model_memory as MM
from transformer_lib.experiments import quant_methods as QM
from transformer_lib.quant.channel_scale import ScaledInput
from transformer_lib.quant.linear import QuantLinear, quantize_model


def tiny_gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=84, block_size=32, n_layers=2, d_model=64, n_heads=4)).eval()


def batches(n=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(x[:, :-1], x[:, 1:]) for x in torch.randint(0, 84, (n, 4, 33), generator=gen)]


# ----------------------------------------------------------------------------- scores
def test_gpt_perplexity_is_exp_of_the_cross_entropy():
    model, data = tiny_gpt(), batches()
    with torch.no_grad():
        logits = torch.cat([model(x)[0] for x, _ in data])  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1), torch.cat([y for _, y in data]).flatten())
    assert QM.gpt_perplexity(model, data) == pytest.approx(math.exp(loss.item()), rel=1e-5)


def test_embedding_agreement_is_one_for_the_model_itself_and_the_mean_cosine_otherwise():
    from transformer_lib.models.pretrained import load_minilm, sentence_embeddings

    model, tok = load_minilm("cpu")
    lines = QM.shakespeare_lines("val", 6, seed=3)
    ref = sentence_embeddings(model, tok, lines)
    assert QM.embedding_agreement(model, tok, lines, ref) == pytest.approx(1.0, abs=1e-6)
    q = quantize_model(copy.deepcopy(model), 4)
    emb = sentence_embeddings(q, tok, lines)
    expected = F.cosine_similarity(emb, ref, dim=-1).mean().item()
    assert QM.embedding_agreement(q, tok, lines, ref) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match=r"reference must be a tensor of shape \(6, 384\) .*got \(3, 384\)"):
        QM.embedding_agreement(model, tok, lines, ref[:3])


# ----------------------------------------------------------------------------- data
def test_shakespeare_lines_are_distinct_in_range_and_from_the_asked_split():
    from transformer_lib.data.corpus import shakespeare_split

    train_text, val_text = shakespeare_split()
    val_lines = QM.shakespeare_lines("val", 20, seed=0)
    assert len(set(val_lines)) == 20 and all(30 <= len(s) <= 120 for s in val_lines)
    assert all(s in val_text for s in val_lines)
    assert QM.shakespeare_lines("val", 20, seed=0) == val_lines  # seeded
    assert QM.shakespeare_lines("val", 20, seed=1) != val_lines
    assert all(s in train_text for s in QM.shakespeare_lines("train", 5))
    with pytest.raises(ValueError, match=r"split must be one of \['train', 'val'\], got 'test'"):
        QM.shakespeare_lines("test", 3)
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        QM.shakespeare_lines("val", 0)
    with pytest.raises(ValueError, match=r"n must be an int <= \d+ \(at most the split's lines of 30-120 characters\)"):
        QM.shakespeare_lines("val", 10**9)


def test_gpt_calibration_batches_are_next_token_windows():
    from transformer_lib.data.tokenization import CharTokenizer
    from transformer_lib.data.corpus import shakespeare_split

    tok = CharTokenizer.from_text(shakespeare_split()[0])
    data = QM.gpt_calibration_batches(tok, 16, n_batches=2, batch_size=3, chars=5_000)
    assert len(data) == 2
    for x, y in data:
        assert x.shape == y.shape == (3, 16)
        assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one token


# ----------------------------------------------------------------------------- RTN vs GPTQ vs AWQ
def test_compare_methods_rows_score_a_quantized_copy_and_leave_the_model_alone():
    model, data = tiny_gpt(), batches()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    score = lambda m: QM.gpt_perplexity(m, data)  # noqa: E731
    out = QM.compare_methods(model, data, score, group_sizes=(None, 16))
    assert [(r["method"], r["group_size"]) for r in out["rows"]] == [(m, g) for g in (None, 16) for m in QM.METHODS]
    assert all(r["seconds"] >= 0 for r in out["rows"])
    assert out["float"] == pytest.approx(score(model))
    # the RTN row is what quantize_model gives, built here by hand
    assert QM.score_of(out, "rtn", 16) == pytest.approx(score(quantize_model(copy.deepcopy(model), 4, 16)))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # a copy was quantized
    with pytest.raises(KeyError):
        QM.score_of(out, "gptq", 32)


def test_quantize_copy_stores_int4_codes_for_every_method():
    # 2 layers x (qkv, out, up, down) + lm_head: nine int4 layers whatever chose the codes
    model, data = tiny_gpt(), batches()
    for method in QM.METHODS:
        q = QM.quantize_copy(model, method, data, 4, 16)
        layers = [m for m in q.modules() if isinstance(m, QuantLinear)]
        assert len(layers) == 9 and all(m.bits == 4 and m.group_size == 16 for m in layers)
    assert isinstance(model.blocks[0].ffn.up, torch.nn.Linear)


def test_awq_alphas_are_the_exponents_the_awq_copy_used():
    # alpha 0 leaves a layer's scale at 1 (round-to-nearest); any other alpha scales its input channels
    model, data = tiny_gpt(), batches()
    alphas = QM.awq_alphas(model, data, 4, 16)
    q = QM.quantize_copy(model, "awq", data, 4, 16)
    scales = {name: m.scale for name, m in q.named_modules() if isinstance(m, ScaledInput)}
    assert sorted(alphas) == sorted(scales) and len(alphas) == 8  # 2 layers x (qkv, out, up, down); lm_head tied
    assert all(min(abs(a - k / 10) for k in range(11)) < 1e-6 for a in alphas.values())  # on the grid
    for name, a in alphas.items():
        assert torch.allclose(scales[name], torch.ones_like(scales[name])) == (a == 0), name


def test_compare_methods_bad_arguments_raise():
    model, data = tiny_gpt(), batches()
    with pytest.raises(ValueError, match=r"methods\[1\] must be one of \['awq', 'gptq', 'rtn'\], got 'hqq'"):
        QM.compare_methods(model, data, lambda m: 0.0, methods=("rtn", "hqq"))
    with pytest.raises(
        ValueError,
        match=r"group_sizes must hold at least 1 item\(s\) \(group sizes, None: one scale per channel\), got 0",
    ):
        QM.compare_methods(model, data, lambda m: 0.0, group_sizes=())
    with pytest.raises(ValueError, match=r"method must be one of \['awq', 'gptq', 'rtn'\], got 'bnb'"):
        QM.quantize_copy(model, "bnb", data)


# ----------------------------------------------------------------------------- SmoothQuant and NF4
def test_outlier_migration_divides_the_outlier_channel_by_its_factor():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 32, generator=gen)
    x[:, 5] *= 40.0
    w = torch.randn(16, 32, generator=gen) * 0.1
    out = QM.outlier_migration(x, w, alpha=0.5)
    assert out["channel"] == 5
    # alpha = 0.5 balances the ranges: max|x_j| / s_j = max|w_j| * s_j = sqrt(max|x_j| max|w_j|)
    expected = math.sqrt(x[:, 5].abs().max().item() * w[:, 5].abs().max().item())
    assert out["x_max_after"] == pytest.approx(expected, rel=1e-5)
    assert out["w_max_after"] == pytest.approx(expected, rel=1e-5)
    assert out["error_after"] < out["error_before"]


def test_linear_weights_counts_a_tied_weight_once():
    model = tiny_gpt()
    flat = QM.linear_weights(model)
    expected = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert flat.numel() == expected  # lm_head is a Linear; tok_emb (tied) is not counted again
    with pytest.raises(
        ValueError, match=r"the nn.Linear layers in model must be an int >= 1 \(model is a LayerNorm\), got 0"
    ):
        QM.linear_weights(torch.nn.LayerNorm(4))
    with pytest.raises(ValueError, match=r"name must be one of \[.*'lm_head'.*\], got 'nope'"):
        QM.layer_inputs(model, batches(), "nope")


def test_nf4_vs_int4_relative_errors_divide_by_the_mean_square():
    w = 3.0 * torch.randn(4096, generator=torch.Generator().manual_seed(0))
    out = QM.nf4_vs_int4({"w": w})["w"]
    power = w.pow(2).mean().item()
    for fmt in ("nf4", "int4_absmax", "int4_zero_point"):
        assert out[f"{fmt} rel"] == pytest.approx(out[fmt] / power)


# ----------------------------------------------------------------------------- memory
def test_transformer_params_matches_the_models_we_load():
    from transformer_lib.book_models.checkpoints import load_shakespeare_gpt
    from transformer_lib.models.pretrained import load_minilm

    minilm, _ = load_minilm("cpu")
    assert MM.transformer_params(6, 384, 1536, 30522, positions=512, token_types=2) == sum(
        p.numel() for p in minilm.parameters()
    )
    gpt, _ = load_shakespeare_gpt("cpu")
    c = gpt.cfg
    assert MM.transformer_params(c.n_layers, c.d_model, c.d_ff, c.vocab_size) == gpt.num_params()
    untied = GPT(GPTConfig(vocab_size=50, block_size=8, n_layers=1, d_model=16, n_heads=2))
    untied.lm_head.weight = torch.nn.Parameter(untied.lm_head.weight.detach().clone())  # break the tie
    assert MM.transformer_params(1, 16, 64, 50, positions=8, tied_head=False) == untied.num_params()  # learned


def test_transformer_params_gated_rmsnorm_stack_by_hand():
    # one layer, d=4, ff=6, vocab 10, no bias, RMSNorm, SwiGLU, untied: 4*16 + 3*24 + 2*4 per layer
    assert (
        MM.transformer_params(1, 4, 6, 10, bias=False, norm_params=1, gated_ffn=True, tied_head=False)
        == (64 + 72 + 8) + 10 * 4 + 4 + 10 * 4
    )
    # grouped-query attention: k and v of width 2
    assert MM.transformer_params(1, 4, 6, 10, bias=False, norm_params=0, kv_dim=2) == 2 * 16 + 2 * 8 + 48 + 40
    with pytest.raises(ValueError, match="d_model must be an int >= 1"):
        MM.transformer_params(1, 0, 6, 10)
    with pytest.raises(ValueError, match="kv_dim must be an int >= 1 or None"):
        MM.transformer_params(1, 4, 6, 10, kv_dim=0)


def test_memory_table_is_params_times_bits_over_eight():
    table = MM.memory_table({"m": 1_000_000}, group_size=32)["m"]
    assert table == {"fp32": 4e6, "fp16": 2e6, "int8": 1e6, "int4 g32": 1e6 * 4.5 / 8}
    with pytest.raises(ValueError, match="n_params must be an int >= 0"):
        MM.weight_bytes(-1, 8)


# ----------------------------------------------------------------------------- chapter 09's committed study
def test_the_committed_study_holds_every_row_chapter_09_reads():
    study = QM.committed_study()
    for model in ("gpt", "minilm"):
        keys = {(r["method"], r["group_size"]) for r in study[model]["rows"]}
        assert keys == {(m, g) for m in QM.METHODS for g in (None, 32)}
        assert all(r["cpu_seconds"] >= 0 and r["score"] > 0 for r in study[model]["rows"])
    assert study["gpt"]["held_out_tokens"] == 4 * 32 * 128 and study["gpt"]["calibration_tokens"] == 8 * 8 * 128
    assert study["gpt"]["gptq_half"]["calibration_tokens"] == 4 * 8 * 128
    # the float model's perplexity in the file is the committed checkpoint's, recomputed here
    from transformer_lib.book_models.checkpoints import load_shakespeare_gpt
    from transformer_lib.book_models.metrics import shakespeare_val_batches

    gpt, _ = load_shakespeare_gpt("cpu")
    with torch.inference_mode():
        ppl = QM.gpt_perplexity(gpt, shakespeare_val_batches(gpt.cfg.block_size, n_batches=4))
    assert ppl == pytest.approx(study["gpt"]["float"], rel=1e-4)


@pytest.mark.slow  # the twelve quantizations: about 30 s of CPU
def test_rerunning_the_method_study_gives_the_committed_numbers():
    from transformer_lib.book_models.checkpoints import load_shakespeare_gpt
    from transformer_lib.models.pretrained import load_minilm

    torch.manual_seed(0)
    gpt, tok = load_shakespeare_gpt("cpu")
    minilm, mtok = load_minilm("cpu")
    fresh, committed = QM.method_study(gpt, tok, minilm, mtok), QM.committed_study()
    for model in ("gpt", "minilm"):
        assert fresh[model]["float"] == pytest.approx(committed[model]["float"], rel=1e-5)
        old = {(r["method"], r["group_size"]): r["score"] for r in committed[model]["rows"]}
        for r in fresh[model]["rows"]:
            assert r["score"] == pytest.approx(old[r["method"], r["group_size"]], rel=1e-4), (model, r)
    assert fresh["gpt"]["gptq_half"]["score"] == pytest.approx(committed["gpt"]["gptq_half"]["score"], rel=1e-4)

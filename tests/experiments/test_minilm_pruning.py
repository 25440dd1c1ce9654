"""MiniLM pruning study (chapter 08): gate gradients against finite differences, masking against removal on the real
model, the Student-t interval against closed forms and simulation, the article's top-k rewrite, argument errors."""

import math

import pytest
import torch

from transformer_lib.compression import pruning as P
from transformer_lib.experiments import minilm_pruning as M
from transformer_lib.models.pretrained import load_minilm, sentence_embeddings

LINES = [
    "Now is the winter of our discontent",
    "Shall I compare thee to a summer's day?",
    "The quality of mercy is not strained at all",
    "All the world's a stage, and all the men players",
]


@pytest.fixture(scope="module")
def minilm64():
    return load_minilm("cpu", dtype=torch.float64)


def _loss_at(model, mask, loss_fn, batch):
    with torch.no_grad(), P.head_mask(model, mask):
        return float(loss_fn(model, batch))


def test_gate_gradient_equals_a_finite_difference_of_the_probe_loss(minilm64):
    model, tok = minilm64
    enc = tok.encode(LINES, max_length=M.MAX_TOKENS)
    r = torch.randn(len(LINES), 384, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    scores = P.head_importance(model, [(enc["input_ids"], enc["attention_mask"], r)], loss_fn=M.probe_loss)
    eps = 1e-2  # LayerNorm computes in fp32 even in a float64 model: a smaller step would measure its rounding
    for layer, head in [(0, 3), (2, 7), (5, 11)]:
        per_sentence = []  # |d (r_b . e_b) / d xi| for each sentence alone, by central differences
        for b in range(len(LINES)):
            batch = (enc["input_ids"][b : b + 1], enc["attention_mask"][b : b + 1], r[b : b + 1])
            up, down = torch.ones(6, 12, dtype=torch.float64), torch.ones(6, 12, dtype=torch.float64)
            up[layer, head], down[layer, head] = 1 + eps, 1 - eps
            per_sentence.append(
                abs(_loss_at(model, up, M.probe_loss, batch) - _loss_at(model, down, M.probe_loss, batch)) / (2 * eps)
            )
        assert scores[layer, head].item() == pytest.approx(sum(per_sentence) / len(LINES), rel=2e-3)


def test_agreement_loss_is_flat_at_the_unpruned_model_while_the_probe_loss_is_not(minilm64):
    model, tok = minilm64
    enc = tok.encode(LINES, max_length=M.MAX_TOKENS)
    target = M.masked_embed(model, enc)
    flat = P.head_importance(model, [(enc["input_ids"], enc["attention_mask"], target)], loss_fn=M.agreement_loss)
    probe = M.sensitivity_importance(model, enc, probes=2)
    assert flat.max() < 1e-9 * probe.max()  # the minimum: the gradient vanishes
    # yet masking a head costs something: a second-order effect, which the first derivative cannot see
    mask = torch.ones(6, 12, dtype=torch.float64)
    mask[5, 0] = 0
    cost = float((1 - M.agreement(model, enc, target, mask)).mean())
    assert cost > 1e-4


def test_masking_heads_equals_removing_them_from_minilm():
    model, tok = load_minilm("cpu")
    enc = tok.encode(LINES, max_length=M.MAX_TOKENS)
    plan = {0: [1, 4], 3: list(range(11)), 5: [0]}
    mask = P.mask_from_heads([12] * 6, plan)
    pruned = P.prune_heads(model, plan)
    assert P.head_counts(pruned) == [10, 12, 12, 1, 12, 11] and P.head_counts(model) == [12] * 6
    removed = sentence_embeddings(pruned, tok, LINES, max_length=M.MAX_TOKENS)  # the library's own pipeline
    torch.testing.assert_close(removed, M.masked_embed(model, enc, mask), atol=1e-5, rtol=0)
    assert P.count_parameters(pruned) == P.count_parameters(model) - 14 * (3 * 32 * 385 + 384 * 32)


def test_dropping_a_minilm_layer_equals_running_the_other_layers_by_hand():
    model, tok = load_minilm("cpu")
    enc = tok.encode(LINES, max_length=M.MAX_TOKENS)
    dropped = P.drop_layers(model, [2])
    with torch.no_grad():
        h = model.embeddings(enc["input_ids"], enc["token_type_ids"])
        for i, layer in enumerate(model.layers):
            if i != 2:
                h = layer(h, attention_mask=enc["attention_mask"].bool())
        got = dropped(enc["input_ids"], enc["attention_mask"]).last_hidden_state
    torch.testing.assert_close(got, h)
    assert len(dropped.layers) == 5 and dropped.cfg.n_layers == 5 and len(model.layers) == 6


def test_t_quantile_matches_closed_forms():
    for p in (0.9, 0.975, 0.995):
        assert M.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-5)  # Cauchy
        assert M.t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-6)
    normal = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.975)).item()
    assert M.t_quantile(0.975, 2000) == pytest.approx(normal, abs=2e-3)


def test_t_interval_is_the_textbook_formula_and_covers_the_mean_95_percent_of_the_time():
    mean, half = M.t_interval([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and half == pytest.approx(3.182446 * math.sqrt(5 / 3) / 2, rel=1e-5)  # t table, df=3
    gen = torch.Generator().manual_seed(0)
    samples = torch.randn(4000, 4, generator=gen) * 2 + 1.0  # true mean 1
    covered = sum(abs(m - 1.0) <= h for m, h in map(M.t_interval, samples))
    assert 0.93 <= covered / 4000 <= 0.97


def test_keep_top_k_scores_keeps_the_k_largest_per_row_and_zeroes_the_rest():
    scores = torch.randn(2, 3, 5, 7, generator=torch.Generator().manual_seed(1))
    out = M.keep_top_k_scores(scores, k=2)
    for row, got in zip(scores.reshape(-1, 7), out.reshape(-1, 7)):
        kth = sorted(row.tolist(), reverse=True)[1]
        assert got.tolist() == [x if x >= kth else 0.0 for x in row.tolist()]
    row = torch.tensor([[-1.0, -2.0, -3.0, -4.0]])  # negative scores: the zeroed keys become the largest
    weights = M.keep_top_k_scores(row, 2).softmax(-1)[0]  # (0.147, 0.054, 0.400, 0.400) by hand
    assert weights[2] > weights[0] and weights[3] > weights[0]


def test_sentence_sets_are_disjoint_and_reproducible():
    sets = M.sentence_sets(3, 20, seed=5)
    flat = [s for group in sets for s in group]
    assert len(flat) == len(set(flat)) == 60 and sets == M.sentence_sets(3, 20, seed=5)
    assert sets != M.sentence_sets(3, 20, seed=6)
    assert all(len(s.split()) >= 6 for s in flat)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: M.sentence_sets(0, 5), "n_sets"),
        (
            lambda: M.sentence_sets(2, 3, lines=["a b c d e f"] * 4),
            r"n_sets \* size must be an int <= 1 \(lines needed: at most the distinct lines given\), got 6",
        ),
        (lambda: M.corpus_lines(0), "min_words"),
        (
            lambda: M.t_interval([1.0]),
            r"the number of values must be an int >= 2 \(an interval needs two at least\), got 1",
        ),
        (lambda: M.t_interval([1.0, 2.0], level=1.5), "level"),
        (lambda: M.t_quantile(0.3, 3), "p must"),
        (lambda: M.t_quantile(0.9, 0), "df must"),
        (lambda: M.keep_top_k_scores(torch.zeros(3, 4), 5), "k must"),
        (lambda: M.sensitivity_importance(torch.nn.Linear(2, 2), {}, probes=0), "probes"),
        (lambda: P.attention_modules(torch.nn.Sequential(torch.nn.Linear(2, 2))), "BertEncoder"),
    ],
)
def test_argument_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_pruning_study_curves_match_physically_pruned_models():
    model, tok = load_minilm("cpu")
    study = M.pruning_study(model, tok, n_sets=2, size=4, ns=[0, 30], probes=1, seed=1)
    assert set(study["curves"]) == {"gradient", "magnitude", "random"}
    for name, curves in study["curves"].items():
        assert curves.shape == (2, 2)
        torch.testing.assert_close(curves[:, 0], torch.ones(2), atol=1e-6, rtol=0)  # nothing removed: agreement 1
    for s, (score_lines, eval_lines) in enumerate(study["sets"]):
        assert not set(score_lines) & set(eval_lines)
        full = sentence_embeddings(model, tok, eval_lines, max_length=M.MAX_TOKENS)
        for name in ("gradient", "random"):
            pruned = P.prune_heads(model, P.heads_to_prune(study["scores"][name][s], 30))
            cos = (sentence_embeddings(pruned, tok, eval_lines, max_length=M.MAX_TOKENS) * full).sum(-1).mean()
            assert study["curves"][name][s, 1].item() == pytest.approx(cos.item(), abs=1e-5)
    assert not torch.equal(study["scores"]["random"][0], study["scores"]["random"][1])


def test_the_committed_study_holds_what_chapter_08_reads():
    study = M.committed_study()
    assert study["params"] == M.CHAPTER
    n, k = M.CHAPTER["n_sets"], len(M.CHAPTER["ns"])
    assert {m: tuple(c.shape) for m, c in study["curves"].items()} == {
        m: (n, k) for m in ("gradient", "magnitude", "random")
    }
    assert len(study["gradient"]) == n and all(g.shape == (6, 12) for g in study["gradient"])
    assert study["magnitude"].shape == study["ablation"].shape == (6, 12)
    assert bool((study["ablation"] > 0).all()) and bool(
        ((study["curves"]["gradient"] > 0) & (study["curves"]["gradient"] <= 1)).all()
    )
    # the weight norms need no data: the committed ones must be this model's, up to float rounding (a norm's
    # summation order follows the CPU's vector width: 1.9e-6 apart between the AVX-512 machine that wrote the file
    # and another AVX-512 one; a different model's norms differ in the first digit)
    model, _ = load_minilm("cpu")
    torch.testing.assert_close(study["magnitude"], P.magnitude_importance(model).float(), rtol=1e-5, atol=0)


@pytest.mark.slow  # the whole study: about 15 s of CPU
def test_rerunning_the_chapter_study_gives_the_committed_numbers():
    model, tok = load_minilm("cpu")
    fresh, committed = M.chapter_study(model, tok, **M.CHAPTER), M.committed_study()
    for m, curve in fresh["curves"].items():
        torch.testing.assert_close(torch.tensor(curve), committed["curves"][m], atol=1e-4, rtol=0)
    for g_new, g_old in zip(fresh["gradient"], committed["gradient"]):
        torch.testing.assert_close(torch.tensor(g_new), g_old, rtol=1e-3, atol=1e-3 * float(g_old.max()))
    torch.testing.assert_close(torch.tensor(fresh["ablation"]), committed["ablation"], atol=1e-5, rtol=1e-3)

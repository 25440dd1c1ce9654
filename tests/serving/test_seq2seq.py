"""Encoder-decoder decoding: greedy, beam search (against an exhaustive search), translate, exact match."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from transformer_lib.data.dates import date_tokenizers
from transformer_lib.models.configs import TransformerConfig
from transformer_lib.models.transformer import Transformer
from transformer_lib.serving.seq2seq import beam_search, exact_match, greedy_decode, translate


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


def _sequence_logprob(model, src, seq, bos, eos):
    """Teacher-forced log p(seq | src), stopping at the first EOS."""
    if eos in seq:
        seq = seq[: seq.index(eos) + 1]
    tgt_in = torch.tensor([[bos] + seq[:-1]])
    logp = F.log_softmax(model(src, tgt_in)[0].float(), -1)
    return float(sum(logp[i, t] for i, t in enumerate(seq)))


def test_beam_search_with_a_wide_beam_finds_the_exhaustive_best():
    model = _tiny_translator(seed=3, src_vocab=10, tgt_vocab=5)  # pad 0, bos 1, eos 2, two letters 3 and 4
    src = torch.tensor([[4, 5, 6, 7]])
    L = 3
    candidates = set()  # every output of at most L tokens: ends at the first EOS, or has L tokens
    for seq in itertools.product((2, 3, 4), repeat=L):
        seq = list(seq)
        candidates.add(tuple(seq[: seq.index(2) + 1] if 2 in seq else seq))
    with torch.no_grad():
        scores = {c: _sequence_logprob(model, src, list(c), 1, 2) for c in candidates}
    best = max(scores, key=scores.get)
    out = beam_search(model, src, bos_id=1, eos_id=2, beam_size=3**L, max_len=L)[0].tolist()
    assert tuple(t for t in out if t != 0) == best
    assert sorted(scores.values())[-1] - sorted(scores.values())[-2] > 1e-4  # a unique best, so the test is sharp


def test_beam_of_one_is_greedy():
    model = _tiny_translator(seed=1)
    src = torch.randint(3, 30, (6, 9))
    assert torch.equal(greedy_decode(model, src, 1, 2, 12), beam_search(model, src, 1, 2, 1, 12))


def test_greedy_decode_picks_the_argmax_of_a_full_forward():
    model = _tiny_translator(seed=2)
    src = torch.randint(3, 30, (4, 7))
    out = greedy_decode(model, src, 1, 2, 6)
    tgt_in = torch.cat([torch.ones(4, 1, dtype=torch.long), out[:, :-1]], 1)
    with torch.no_grad():
        ref = model(src, tgt_in).argmax(-1)
    alive = torch.cumsum(out == 2, 1) - (out == 2).long() == 0  # positions up to and including the first EOS
    assert torch.equal(out[alive], ref[alive])


def test_translate_and_exact_match():
    src_tok, tgt_tok = date_tokenizers()
    model = _tiny_translator(src_vocab=src_tok.vocab_size, tgt_vocab=tgt_tok.vocab_size)
    outs = translate(model, ["3/3/87", "May 4, 1960", "1987/3/3"], src_tok, tgt_tok, max_len=5)
    assert len(outs) == 3 and all(len(o) <= 5 and set(o) <= set("0123456789-") for o in outs)
    src = torch.tensor([src_tok.encode("3/3/87")])
    ids = beam_search(model, src, tgt_tok.bos_id, tgt_tok.eos_id, 3, 5)[0].tolist()
    ids = ids[: ids.index(tgt_tok.eos_id)] if tgt_tok.eos_id in ids else ids
    assert translate(model, ["3/3/87"], src_tok, tgt_tok, beam_size=3, max_len=5) == [tgt_tok.decode(ids)]
    assert exact_match(["a", "b", "c", "d"], ["a", "x", "c", "y"]) == 0.5
    with pytest.raises(ValueError, match=r"len\(predictions\) must be 2 \(one per reference, equally long\), got 1"):
        exact_match(["a"], ["a", "b"])


def test_translate_restores_the_training_mode():
    src_tok, tgt_tok = date_tokenizers()
    model = _tiny_translator(src_vocab=src_tok.vocab_size, tgt_vocab=tgt_tok.vocab_size).train()
    translate(model, ["3/3/87"], src_tok, tgt_tok, max_len=3)
    assert model.training

"""Decoding with a trained encoder-decoder ``Transformer``: greedy, beam search, and scoring the translations.

Used in chapters 00 and 05.

* ``greedy_decode``: the most likely next token at every step.
* ``beam_search``: the ``beam_size`` most likely prefixes, the best finished one returned.
* ``translate``: texts in, texts out, through a pair of tokenizers; ``exact_match`` scores the outputs.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_equal, check_int
from ..utils.modes import eval_mode
from .kv_cache import DynamicCache
from ..data.tokenization import pad_sequences


@torch.no_grad()
def greedy_decode(model: nn.Module, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int = 32) -> torch.Tensor:
    """Most likely next token at each step (PAD and BOS excluded). ``src: (B, S)`` -> ``(B, <= max_len)`` ids,
    without BOS, padded with ``pad_id`` after EOS."""
    pad = model.cfg.pad_id
    attention_mask = src != pad  # (B, S)
    memory = model.encode(src, attention_mask)  # (B, S, d_model)
    out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    cache = DynamicCache()  # the decoder's keys and values so far: each step feeds only the newest token
    for _ in range(max_len):
        logits = model.decode(out[:, -1:], memory, attention_mask, cache=cache)[:, -1]  # (B, V)
        logits[:, [pad, bos_id]] = float("-inf")  # never valid outputs
        nxt = logits.argmax(-1).masked_fill(done, pad)
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return out[:, 1:]


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    max_len: int = 32,
    length_penalty: float = 0.0,
) -> torch.Tensor:
    """Keep the ``beam_size`` most likely prefixes per source; return each source's best finished one.

    Score = sum of log-probabilities / length**``length_penalty`` (0: plain sum). ``src: (B, S)`` ->
    ``(B, <= max_len)`` ids like ``greedy_decode``. ``beam_size=1`` equals greedy decoding.
    """
    check_int("beam_size", beam_size, min=1)
    pad, B, K = model.cfg.pad_id, src.shape[0], beam_size  # src: (B, S)
    attention_mask = src != pad
    memory = model.encode(src, attention_mask)  # (B, S, d)
    memory = memory.repeat_interleave(K, 0)  # (B*K, S, d): the K beams of source b are rows b*K..b*K+K-1
    attention_mask = attention_mask.repeat_interleave(K, 0)
    seqs = torch.full((B * K, 1), bos_id, dtype=torch.long, device=src.device)
    scores = torch.zeros(B, K, device=src.device)
    scores[:, 1:] = float("-inf")  # start from one live beam per source
    done = torch.zeros(B * K, dtype=torch.bool, device=src.device)
    cache = DynamicCache()  # the decoder's keys and values, one row per beam, reordered with the beams
    for _ in range(max_len):
        logits = model.decode(seqs[:, -1:], memory, attention_mask, cache=cache)[:, -1].float()  # (B*K, V)
        logits[:, [pad, bos_id]] = float("-inf")  # never valid outputs
        logp, V = F.log_softmax(logits, dim=-1), logits.shape[-1]
        # a finished beam can only be extended by PAD, at no cost
        frozen = torch.full_like(logp, float("-inf"))
        frozen[:, pad] = 0.0
        logp = torch.where(done[:, None], frozen, logp)
        cand = (scores.view(B * K, 1) + logp).view(B, K * V)  # (B, K*V)
        scores, flat = cand.topk(K, dim=-1)  # (B, K)
        beam, tok = flat // V, flat % V
        rows = (torch.arange(B, device=src.device)[:, None] * K + beam).view(-1)  # parent rows
        seqs = torch.cat([seqs[rows], tok.view(-1, 1)], dim=1)
        cache.keys, cache.values = [k[rows] for k in cache.keys], [v[rows] for v in cache.values]  # follow parents
        done = done[rows] | (tok.view(-1) == eos_id)
        if done.all():
            break
    lengths = ((seqs[:, 1:] != pad).sum(-1)).clamp(min=1).float().view(B, K)
    best = (scores / lengths**length_penalty).argmax(-1)  # (B,)
    return seqs.view(B, K, -1)[torch.arange(B, device=src.device), best, 1:]


def translate(
    model: nn.Module,
    src_texts: Sequence[str],
    src_tok,
    tgt_tok,
    beam_size: int = 1,
    max_len: int = 32,
    batch_size: int = 256,
) -> list[str]:
    """Translate texts with a trained ``Transformer``; greedy when ``beam_size == 1``, else beam search."""
    device = next(model.parameters()).device
    out = []
    with eval_mode(model):
        for i in range(0, len(src_texts), batch_size):
            src = pad_sequences([src_tok.encode(t) for t in src_texts[i : i + batch_size]], src_tok.pad_id)
            src = src.to(device)  # (B, S)
            if beam_size == 1:
                ids = greedy_decode(model, src, tgt_tok.bos_id, tgt_tok.eos_id, max_len)
            else:
                ids = beam_search(model, src, tgt_tok.bos_id, tgt_tok.eos_id, beam_size, max_len)
            for row in ids.tolist():
                out.append(tgt_tok.decode(row[: row.index(tgt_tok.eos_id)] if tgt_tok.eos_id in row else row))
    return out


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of predictions equal to their reference, character for character."""
    check_int("len(references)", len(references), min=1)
    check_equal("len(predictions)", len(predictions), len(references), note="one per reference, equally long")
    return sum(p == r for p, r in zip(predictions, references)) / len(references)

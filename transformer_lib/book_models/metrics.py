"""What the book reports about its two trained models: the GPT's loss in nats per character on fixed held-out
windows, and the translator's exact-match accuracy on the held-out dates.

Used in chapters 00, 05, 06, 07, 08 and 09.

Both are the numbers the checkpoints' json records hold (``recipes`` measures them after training) and the
chapters recompute on the loaded models.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ..data.corpus import get_batch, shakespeare_split
from ..data.dates import date_test_set
from ..models.transformer import GPT, Transformer
from ..utils.modes import eval_mode
from ..serving.seq2seq import exact_match, translate
from ..data.tokenization import CharTokenizer
from .checkpoints import gpt_tokenizer
from ..utils.checks import check_choice

GPT_VAL_BATCHES, GPT_VAL_BATCH_SIZE, GPT_VAL_SEED = 50, 32, 1234  # the reported metric: 204,800 tokens


@torch.no_grad()
def nats_per_char(model: GPT, batches, token_lengths: torch.Tensor) -> float:
    """Summed next-token cross-entropy over ``batches`` of ``(x, y)``, each ``(B, T)``, divided by the characters
    the targets spell (``token_lengths[y].sum()``). Equals the mean loss per token for a character-level model,
    and makes models with different tokenizers comparable."""
    device = next(model.parameters()).device
    total, chars = 0.0, 0
    with eval_mode(model):
        for x, y in batches:
            logits = model(x.to(device))[0]  # (B, T, V)
            total += F.cross_entropy(logits.flatten(0, 1).float(), y.to(device).flatten(), reduction="sum").item()
            chars += int(token_lengths[y].sum())
    return total / chars


@functools.lru_cache(maxsize=2)
def shakespeare_gpt_ids(split: str) -> torch.Tensor:
    """``(N,)`` token ids of the training (``"train"``) or held-out (``"val"``) works, under the committed GPT's
    tokenizer. Encoded once per process (the training works take a few seconds)."""
    check_choice("split", split, ("train", "val"))
    return gpt_tokenizer().encode_tensor(shakespeare_split()[split == "val"])


def shakespeare_val_batches(
    block_size: int = 128,
    n_batches: int = GPT_VAL_BATCHES,
    batch_size: int = GPT_VAL_BATCH_SIZE,
    seed: int = GPT_VAL_SEED,
    val: torch.Tensor | None = None,
) -> list:
    """Fixed random windows of the held-out works: ``n_batches`` of ``(x, y)``, each ``(batch_size, block_size)``
    token ids; ``val: (N,)`` the encoded held-out works (default: ``shakespeare_gpt_ids("val")``)."""
    gen = torch.Generator().manual_seed(seed)
    val = shakespeare_gpt_ids("val") if val is None else val
    return [get_batch(val, block_size, batch_size, gen) for _ in range(n_batches)]


def shakespeare_val_loss(model: GPT) -> float:
    """The committed GPT's (or a copy's) validation loss in nats per character on the fixed held-out batches."""
    return nats_per_char(model, shakespeare_val_batches(model.cfg.block_size), gpt_tokenizer().token_lengths)


def date_accuracy(
    model: Transformer, src_tok: CharTokenizer, tgt_tok: CharTokenizer, beam_size: int = 1, n: int = 1000
) -> float:
    """Exact-match accuracy on the first ``n`` pairs of the held-out date set (test days only)."""
    pairs = date_test_set()[:n]
    preds = translate(model, [s for s, _ in pairs], src_tok, tgt_tok, beam_size=beam_size, max_len=16)
    return exact_match(preds, [t for _, t in pairs])

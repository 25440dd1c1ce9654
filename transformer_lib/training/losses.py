"""The two training objectives of the book's models, as ``(model, batch) -> scalar loss`` functions."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def gpt_loss(model: nn.Module, batch) -> torch.Tensor:
    """Next-token cross-entropy of a ``GPT`` on ``(x: (B, T), y: (B, T))``."""
    x, y = batch
    return model(x, y)[1]


def seq2seq_loss(model: nn.Module, batch) -> torch.Tensor:
    """Teacher-forced cross-entropy of a ``Transformer`` on a ``TranslationBatch``; padding is ignored."""
    pad = model.cfg.pad_id
    logits = model(batch.src, batch.tgt_in, decoder_attention_mask=batch.tgt_in != pad)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=pad)

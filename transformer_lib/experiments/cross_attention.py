"""Chapter 05's look inside the trained date translator: what its decoder reads in the source
(``cross_attention_maps``), and the score beam search maximises (``sequence_log_prob``).

Used in chapter 05.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.transformer import Transformer
from ..utils.modes import eval_mode
from ..serving.seq2seq import greedy_decode


@torch.no_grad()
def cross_attention_maps(model: Transformer, src_tok, tgt_tok, text: str, max_len: int = 16):
    """Translate ``text`` greedily, then rerun the decoder on its own output to read the cross-attention.

    Returns ``(source_chars, output_chars, weights)``: ``weights: (n_layers, n_heads, T_out, S)``, where row
    ``i`` is the decoder position that *produced* ``output_chars[i]`` (the last one is ``"<eos>"``).
    """
    device = next(model.parameters()).device
    src = torch.tensor([src_tok.encode(text)], device=device)  # (1, S)
    with eval_mode(model):
        out = greedy_decode(model, src, tgt_tok.bos_id, tgt_tok.eos_id, max_len)[0].tolist()
        out = out[: out.index(tgt_tok.eos_id) + 1] if tgt_tok.eos_id in out else out
        tgt_in = torch.tensor([[tgt_tok.bos_id] + out[:-1]], device=device)  # (1, T): BOS + all but the last
        attention_mask = src != model.cfg.pad_id
        model.decode(tgt_in, model.encode(src, attention_mask), attention_mask, need_weights=True)
        weights = torch.stack([layer.cross_weights[0] for layer in model.decoder]).float().cpu()  # (L, H, T, S)
    labels = [tgt_tok.itos[i] for i in out]
    return list(text), labels, weights


@torch.no_grad()
def sequence_log_prob(model: Transformer, src_tok, tgt_tok, text: str, output: str) -> float:
    """``log p(output + <eos> | text)`` under ``model`` (teacher forcing): the score beam search maximises."""
    device = next(model.parameters()).device
    src = torch.tensor([src_tok.encode(text)], device=device)
    target = tgt_tok.encode(output, eos=True)
    tgt_in = torch.tensor([[tgt_tok.bos_id] + target[:-1]], device=device)
    with eval_mode(model):
        logits = model(src, tgt_in)[0].float()  # (T, V)
    logits[:, [model.cfg.pad_id, tgt_tok.bos_id]] = float("-inf")  # never outputs, as in greedy_decode/beam_search
    logp = F.log_softmax(logits, dim=-1)
    return float(logp[torch.arange(len(target)), torch.tensor(target, device=device)].sum())

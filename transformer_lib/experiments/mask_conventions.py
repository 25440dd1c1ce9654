"""Chapter 06's three mask conventions on one padded batch: the same attention through three libraries.

Used in chapter 06.

* this library (and ``F.scaled_dot_product_attention``): a boolean mask is **True where a query may attend**;
* ``torch.nn.MultiheadAttention``: ``key_padding_mask`` is **True where a key is ignored** (the opposite);
* Hugging Face ``transformers``: ``attention_mask`` is **1 on the tokens to keep**, 0 on padding.

``torch_mha_from`` copies one of our ``MultiHeadAttention`` layers into an ``nn.MultiheadAttention`` (same weights),
``hf_minilm`` loads the Hugging Face ``BertModel`` from the same MiniLM files as ``pretrained.load_minilm``, and
``convention_outputs`` runs the batch through all three with each library's own mask, so the chapter can check
that they agree.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn as nn

from ..models.transformer import BertEncoder
from ..blocks.multihead import MultiHeadAttention
from ..utils.checks import check_tensor


def torch_mha_from(attn: MultiHeadAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention`` (``batch_first=True``) with ``attn``'s weights.

    Both stack ``[W_Q; W_K; W_V]`` in one ``(3 d_model, d_model)`` matrix (``attn.qkv``, ``in_proj_weight``), so
    the copy is one line per tensor. Needs plain multi-head attention (as many key/value heads as query heads)."""
    plain = "(3 d_model, d_model): plain multi-head attention, as many key/value heads as query heads"
    check_tensor("attn.qkv.weight", attn.qkv.weight, (3 * attn.d_model, attn.d_model), note=plain)
    check_tensor("attn.qkv.bias", attn.qkv.bias, note="nn.MultiheadAttention's in_proj_bias")
    w = attn.qkv.weight
    mha = nn.MultiheadAttention(attn.d_model, attn.n_heads, batch_first=True, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(w)
        mha.in_proj_bias.copy_(attn.qkv.bias)
        mha.out_proj.weight.copy_(attn.out.weight)
        mha.out_proj.bias.copy_(attn.out.bias)
    return mha.eval()


@contextmanager
def _quiet(*logger_names: str):
    """Raise the named loggers to ERROR inside the block (restored after)."""
    loggers = [logging.getLogger(name) for name in logger_names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def hf_minilm(device=None):
    """Hugging Face's ``BertModel`` from the MiniLM folder of ``pretrained.minilm_dir`` (offline, eager attention,
    so it can return its weights). Needs the ``transformers`` package."""
    # transformers imports torchao when it is installed, which logs warnings about kernels for other
    # hardware and a torch deprecation: not ours to fix, and not the reader's concern here
    with _quiet("torchao", "torch.utils._pytree"):
        from transformers import BertModel  # optional dependency: only this function needs it
        from transformers.utils import logging as hf_logging

    from ..models.pretrained import minilm_dir

    hf_logging.disable_progress_bar()  # no "Loading weights" bar in the chapter's output
    try:
        model = BertModel.from_pretrained(str(minilm_dir()), attn_implementation="eager")
    finally:
        hf_logging.enable_progress_bar()
    return model.to(device or "cpu").eval()


@dataclass
class ConventionOutputs:
    """The mask each library was given and what it computed, for a batch ``(B, T)``."""

    keep: torch.Tensor  # (B, T) bool, ours: True = may attend
    key_padding_mask: torch.Tensor  # (B, T) bool, nn.MultiheadAttention: True = ignore
    attention_mask: torch.Tensor  # (B, T) int64, Hugging Face: 1 = keep
    weights: dict  # library name -> layer-0 attention weights (B, H, T, T)
    attn_out: dict  # "library", "torch" -> layer-0 attention output (B, T, d_model)
    hidden: dict  # "library", "hugging face" -> last hidden state (B, T, d_model)


@torch.no_grad()
def convention_outputs(
    model: BertEncoder, hf_model, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> ConventionOutputs:
    """Run the padded batch ``input_ids: (B, T)`` (``attention_mask: (B, T)``, 1 on real tokens, the tokenizer's
    output) through our MiniLM (``keep``: True = may attend), an ``nn.MultiheadAttention`` holding its layer-0
    weights (``key_padding_mask = ~keep``: True = ignore) and Hugging Face's ``BertModel`` (``attention_mask``:
    1 = keep). Compares layer 0's attention weights of all three, layer 0's attention output of ours and
    PyTorch's, and the last hidden state of ours and Hugging Face's."""
    keep = attention_mask.bool()  # (B, T)
    ignore = ~keep  # nn.MultiheadAttention's key_padding_mask
    ours = model(input_ids, keep, need_weights=True)
    x = ours.hidden_states[0]  # (B, T, d_model): the embeddings, layer 0's input
    lib_out, lib_w = model.layers[0].self_attn(x, attention_mask=keep, need_weights=True)
    mha = torch_mha_from(model.layers[0].self_attn)
    torch_out, torch_w = mha(x, x, x, key_padding_mask=ignore, need_weights=True, average_attn_weights=False)
    hf = hf_model(input_ids=input_ids, attention_mask=attention_mask.long(), output_attentions=True)
    return ConventionOutputs(
        keep,
        ignore,
        attention_mask.long(),
        weights={"library": lib_w, "torch": torch_w, "hugging face": hf.attentions[0]},
        attn_out={"library": lib_out, "torch": torch_out},
        hidden={"library": ours.last_hidden_state, "hugging face": hf.last_hidden_state},
    )


def max_difference(values: dict, rows: torch.Tensor | None = None) -> float:
    """Largest ``|a - b|`` between the first tensor of ``values`` and each other one; ``rows: (B, T)`` bool keeps
    only those positions (the real tokens) along the first two axes."""
    first, *others = (v.float() for v in values.values())
    if rows is not None and first.dim() == 3:
        first, others = first[rows], [o[rows] for o in others]
    return max(float((first - o).abs().max()) for o in others)

"""A frozen baseline: the hand-written decoding step the library used before decoding went through the model's own
forward (``transformer_lib/serving/decoding.py`` at commit f165f25, ``fused_decode_step`` and ``MatvecWeights``).

Kept here, outside the library, only so ``bench_kv_cache.py`` can time the library's ``generate`` against it in the
same run. It writes out the pre-norm GPT block of that time with fewer kernels (fused layer norm, one mask per
step) and multiplies by ``(in, out)`` copies of the linear weights, built once (``matvec_copies``). It knows nothing
of hooks, patched modules or other block types: that is why it left the library. Do not import it from the library.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from transformer_lib.serving.kv_cache import StaticCache


def matvec_copies(model) -> dict:
    """``(in, out)`` copies of every plain ``nn.Linear`` weight of a GPT (blocks and head), keyed by module."""
    layers = [model.lm_head] + [
        lin for b in model.blocks for lin in (b.self_attn.qkv, b.self_attn.out, b.ffn.up, b.ffn.down)
    ]
    return {lin: lin.weight.detach().t().contiguous() for lin in layers if type(lin) is nn.Linear}


def _layer_norm(norm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, norm.weight.shape, norm.weight, norm.bias, norm.eps)


def _linear(lin, x: torch.Tensor, copies: dict) -> torch.Tensor:
    """``lin(x)`` for ``x: (B, 1, in)`` through the ``(in, out)`` copy of its weight."""
    w = copies.get(lin)
    if w is None:
        return lin(x)
    x2 = x.view(x.shape[0], -1)  # (B, in)
    y = torch.mm(x2, w) if lin.bias is None else torch.addmm(lin.bias, x2, w)  # (B, out)
    return y.view(x.shape[0], 1, -1)


def _attend(attn, h: torch.Tensor, cache, copies: dict) -> torch.Tensor:
    B, H = h.shape[0], attn.n_heads
    qkv = _linear(attn.qkv, h, copies)  # (B, 1, 3 H d_head)
    q, k, v = qkv.view(B, 1, 3 * H, attn.d_head).transpose(1, 2).split([H, H, H], dim=1)
    k, v = cache.update(k, v, attn.layer_idx)  # (B, H, past + 1, d_head)
    y = F.scaled_dot_product_attention(q, k, v)  # (B, H, 1, d_head): the newest position sees every key
    return _linear(attn.out, y.transpose(1, 2).reshape(B, 1, H * attn.d_head), copies)


@torch.inference_mode()
def fused_decode_step(model, token: torch.Tensor, cache, copies: dict) -> torch.Tensor:
    """One token ``(B, 1)`` through a learned-position pre-norm GPT: logits ``(B, V)``."""
    past = cache.get_seq_length(0)
    x = model.tok_emb(token) + model.position_table()[past]  # (B, 1, d_model)
    for block in model.blocks:
        x = x + _attend(block.self_attn, _layer_norm(block.res_self.norm, x), cache, copies)
        up = _linear(block.ffn.up, _layer_norm(block.res_ffn.norm, x), copies)
        x = x + _linear(block.ffn.down, block.ffn.act(up), copies)
    return _linear(model.lm_head, _layer_norm(model.norm, x), copies)[:, -1]  # (B, V)


@torch.inference_mode()
def frozen_generate(model, prompt: torch.Tensor, n: int, copies: dict) -> torch.Tensor:
    """Greedy ``n`` new tokens as the library's ``generate`` did then: prefill through the model, then fused steps."""
    B, T = prompt.shape
    cache = StaticCache.for_model(model, B, T + n)
    ids = torch.empty(B, T + n, dtype=prompt.dtype, device=prompt.device)
    ids[:, :T] = prompt
    logits = model(prompt, cache=cache)[0][:, -1]
    for i in range(n):
        ids[:, T + i] = logits.argmax(-1)
        if i < n - 1:
            logits = fused_decode_step(model, ids[:, T + i : T + i + 1], cache, copies)
    return ids

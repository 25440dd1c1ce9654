"""One decoding step through a decoder's blocks, the path ``generate`` takes after the prefill.

Used in chapter 07.

``decode_step(model, token, cache)`` is the production path: GPT's pre-norm blocks with fewer kernel launches per
token than ``model(token, cache=cache)`` (fused layer norm, masks built once per step instead of once per layer);
``fused_decode_step`` is the same without the checks, which ``generate`` makes once before its loop. At decoding
time each kernel works on a single position, so launch and Python costs are a large share of the time on small
models. ``MatvecWeights`` holds ``(in, out)`` copies of the linear weights, the layout a one-token matrix-vector
product reads fastest on a CPU.

Which models can take this path: ``fast_path_refusal(model)`` says why a model is not GPT's pre-norm causal block
(library ``LayerNorm``, ``CachedSelfAttention``, ``FeedForward``, eval mode, no hooks), and ``cache_refusal`` why a
model cannot use a cache at all (a non-causal one).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..blocks.layers import DecoderLayer, FeedForward, LayerNorm, Residual
from ..blocks.cached_attention import CachedSelfAttention
from ..blocks.grouped_query import GroupedQueryAttention
from ..blocks.positional import alibi_bias
from ..utils.checks import check_ids, check_tensor, check_type


def cache_refusal(model) -> str | None:
    """Why ``model`` cannot decode with a KV cache, or None when it can.

    A cache holds each past position's keys and values as they were computed when that position was new.
    That is exact only if no position's output depends on later ones: every block's attention causal.
    """
    for i, block in enumerate(model.blocks):
        if not getattr(block, "causal", False):
            return (
                f"block {i}'s self-attention is not causal (variants.set_causal(model, False)): each past "
                "position would have to see the tokens after it, so its cached keys and values go stale"
            )
    return None


def _hooked(module: nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _block_refusal(block) -> str | None:
    """Why ``decode_step`` does not implement this block, or None."""
    if type(block) is not DecoderLayer or block.cross_attn is not None or not block.causal:
        return "it is not a causal GPT DecoderLayer (self-attention and FFN only)"
    for res in (block.res_self, block.res_ffn):
        if type(res) is not Residual or not res.norm_first or type(res.norm) is not LayerNorm:
            norm = type(getattr(res, "norm", None)).__name__
            return (
                f"its residuals are not pre-norm with the library LayerNorm (found norm_first="
                f"{getattr(res, 'norm_first', None)}, norm {norm})"
            )
    if type(block.self_attn) not in (CachedSelfAttention, GroupedQueryAttention) or type(block.ffn) is not FeedForward:
        return "its attention or FFN is not the library's CachedSelfAttention or GroupedQueryAttention / FeedForward"
    if block.self_attn.window is not None:
        return f"its attention has a sliding window ({block.self_attn.window}); decode_step attends to every key"
    if any(
        _hooked(m)
        for m in (
            block,
            block.res_self,
            block.res_ffn,
            block.res_self.norm,
            block.res_ffn.norm,
            block.self_attn,
            block.ffn,
        )
    ):
        return "a module has forward hooks (decode_step would skip them)"
    return None


def check_cacheable(model) -> None:
    """Raise ``ValueError`` (saying why, from ``cache_refusal``) unless ``model`` can decode with a KV cache."""
    reason = cache_refusal(model)
    if reason is not None:
        raise ValueError(f"this model cannot decode with a KV cache: {reason}; pass use_cache=False")


def fast_path_refusal(model) -> str | None:
    """Why ``decode_step``'s written-out block does not compute what ``model`` computes, or None when it does.

    ``decode_step`` implements a ``GPT`` in eval mode whose blocks are pre-norm, causal ``DecoderLayer``s made of
    the library's ``LayerNorm``, ``CachedSelfAttention`` (or ``GroupedQueryAttention``) and ``FeedForward``, with a
    final ``LayerNorm`` and no
    forward hooks on the modules it bypasses. Linear layers (plain, quantized, hooked) are called as modules.
    """
    if model.training:
        return "the model is in training mode (dropout)"
    if type(model.norm) is not LayerNorm:
        return f"its final norm is {type(model.norm).__name__}, not the library LayerNorm"
    if any(_hooked(m) for m in (model, model.norm, model.drop) + ((model.pos,) if model.pos is not None else ())):
        return "the model, its final norm, dropout or positional module has forward hooks"
    for i, block in enumerate(model.blocks):
        reason = _block_refusal(block)
        if reason is None and model.cfg.positional == "alibi" and block.self_attn.n_heads != model.cfg.n_heads:
            reason = f"its {block.self_attn.n_heads} heads differ from cfg.n_heads={model.cfg.n_heads} (ALiBi slopes)"
        if reason is not None:
            return f"block {i}: {reason}"
    return None


def _layer_norm(norm, x: torch.Tensor) -> torch.Tensor:
    """The library ``LayerNorm`` as one fused kernel (statistics in fp32, as there)."""
    if x.dtype == norm.weight.dtype == torch.float32:
        return F.layer_norm(x, norm.weight.shape, norm.weight, norm.bias, norm.eps)
    return F.layer_norm(x.float(), norm.weight.shape, norm.weight.float(), norm.bias.float(), norm.eps).to(x.dtype)


class MatvecWeights:
    """``(in, out)`` copies of a GPT's plain ``nn.Linear`` weights (blocks and head), for decoding.

    Decoding multiplies each weight by one vector per row, a matrix-vector product that streams the whole
    matrix from memory. ``nn.Linear`` stores ``W`` as ``(out, in)``; on the x86-64 CPU (MKL) this book was
    built on, the same product read ``W`` faster stored as ``(in, out)``, GPT-2's ``Conv1D`` layout
    (``benchmarks/bench_kv_cache.py`` times decoding with both). The copies double the weights' memory.
    Layers with hooks, of another type (e.g. the library's ``QuantLinear``) or whose weight is a tensor subclass
    (e.g. torchao's quantized weights, which keep ``nn.Linear`` as the module) are left out: they run as modules.

    ``generate`` builds one per call unless it is given one: build it once after loading a model (as serving
    engines repack weights at load time) and pass it to every call. Each copy remembers its source weight's
    version counter; ``check(model)`` refuses copies whose weights have changed since (training, ``load_state_dict``,
    any in-place op; writes through ``weight.data`` bypass the counter and are not seen).
    """

    def __init__(self, model):
        layers = [model.lm_head] + [
            lin for b in model.blocks for lin in (b.self_attn.qkv, b.self_attn.out, b.ffn.up, b.ffn.down)
        ]
        self.copies = {
            lin: lin.weight.detach().t().contiguous()
            for lin in layers
            if type(lin) is nn.Linear
            and type(lin.weight) in (nn.Parameter, torch.Tensor)
            and not (lin._forward_hooks or lin._forward_pre_hooks)
        }
        self._sources = {lin: (lin.weight, _version(lin.weight)) for lin in self.copies}

    def get(self, lin):
        """The ``(in, out)`` weight of ``lin``, or None: it runs as a module."""
        return self.copies.get(lin)

    def __contains__(self, lin) -> bool:
        return lin in self.copies

    def __len__(self) -> int:
        return len(self.copies)

    def check(self, model) -> None:
        """Raise ``ValueError`` unless every copy belongs to ``model`` and its source weight is unchanged."""
        mine = set(model.modules())
        for lin, (weight, version) in self._sources.items():
            if lin not in mine:
                raise ValueError(
                    "matvec_weights holds layers of another model: build it with "
                    "MatvecWeights(model) for the model you decode"
                )
            if lin.weight is not weight or _version(weight) != version:
                raise ValueError(
                    "matvec_weights is stale: a weight changed after MatvecWeights(model) copied it; build a new one"
                )


def _version(t: torch.Tensor) -> int | None:
    """The in-place-write counter of ``t`` (None for tensors made under ``torch.inference_mode``, which have none)."""
    return None if t.is_inference() else t._version


def _linear(lin, x: torch.Tensor, matvec_weights: MatvecWeights | None) -> torch.Tensor:
    """``lin(x)`` for ``x: (B, 1, in)``, through the ``(in, out)`` copy of its weight when there is one."""
    w = None if matvec_weights is None else matvec_weights.get(lin)
    if w is None:
        return lin(x)
    x2 = x.view(x.shape[0], -1)  # (B, in)
    y = torch.mm(x2, w) if lin.bias is None else torch.addmm(lin.bias, x2, w)  # (B, out)
    return y.view(x.shape[0], 1, -1)


def _attend(attn, h: torch.Tensor, cache, past: int, mask, matvec_weights) -> torch.Tensor:
    """``CachedSelfAttention.forward(h, is_causal=True, cache=cache)`` for one new position per row."""
    B, H, H_kv = h.shape[0], attn.n_heads, attn.n_kv_heads
    qkv = _linear(attn.qkv, h, matvec_weights)  # (B, 1, (H + 2 H_kv) d_head): [q heads | k heads | v heads]
    q, k, v = qkv.view(B, 1, H + 2 * H_kv, attn.d_head).transpose(1, 2).split([H, H_kv, H_kv], dim=1)
    if attn.rope is not None:
        q, k = attn.rope(q, offset=past), attn.rope(k, offset=past)
    k, v = cache.update(k, v, attn.layer_idx)  # (B, H_kv, past + 1, d_head)
    # the newest position sees every cached key: no causal mask; grouped kv heads are shared in the kernel
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=H_kv != H)  # (B, H, 1, d_head)
    return _linear(attn.out, y.transpose(1, 2).reshape(B, 1, H * attn.d_head), matvec_weights)  # (B, 1, d_model)


@torch.inference_mode()
def decode_step(
    model,
    token: torch.Tensor,
    cache,
    position: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    matvec_weights: MatvecWeights | None = None,
):
    """One new token through a ``GPT``, reading and extending ``cache``: logits ``(B, V)``, checked.

    ``token: (B, 1)`` ids; ``position: (B, 1)`` per-row positions for learned/sinusoidal tables (default: the cache
    length); ``attention_mask: (B, past + 1)`` bool; ``matvec_weights``: optional ``MatvecWeights(model)``.
    A non-causal model raises ``ValueError`` (``cache_refusal``); one that ``fused_decode_step`` does not write out
    (``fast_path_refusal``) runs through its modules; any other takes ``fused_decode_step``, the same numbers.
    Everything is checked before the cache is touched, so a refused call leaves it as it was."""
    check_cacheable(model)
    check_ids("token", token, model.cfg.vocab_size, shape=(None, 1))
    check_type("cache", cache, methods=("get_seq_length", "update"), expected="a KV cache (serving.StaticCache, ...)")
    mask_shape = (token.shape[0], cache.get_seq_length(0) + 1)  # (B, past + 1)
    check_tensor("attention_mask", attention_mask, mask_shape, dtype=torch.bool, optional=True)
    if fast_path_refusal(model) is not None:
        return model(token, cache=cache, attention_mask=attention_mask, position_ids=position)[0][:, -1]
    return fused_decode_step(model, token, cache, position, attention_mask, matvec_weights)


@torch.inference_mode()
def fused_decode_step(
    model,
    token: torch.Tensor,
    cache,
    position: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    matvec_weights: MatvecWeights | None = None,
):
    """``decode_step`` without its checks (``generate`` makes them once before its loop): the pre-norm GPT block
    written out with fewer kernels. Only for a model whose ``cache_refusal`` and ``fast_path_refusal`` are None."""
    past = cache.get_seq_length(0)
    x = model.tok_emb(token)  # (B, 1, d_model)
    table = model.position_table()
    if table is not None:
        x = x + (table[past] if position is None else table[position]).to(x.dtype)
    mask = None if attention_mask is None else attention_mask[:, None, None, :]  # (B, 1, 1, past + 1)
    if model.cfg.positional == "alibi":
        bias = alibi_bias(model.cfg.n_heads, 1, past + 1, device=x.device, dtype=x.dtype)  # (H, 1, past + 1)
        mask = bias if mask is None else bias.masked_fill(~mask, torch.finfo(x.dtype).min)  # (B, H, 1, past + 1)
    for block in model.blocks:  # pre-norm GPT block: x + attn(norm(x)), then x + ffn(norm(x))
        x = x + _attend(block.self_attn, _layer_norm(block.res_self.norm, x), cache, past, mask, matvec_weights)
        ffn = block.ffn  # eval mode: its dropout is the identity
        up = _linear(ffn.up, _layer_norm(block.res_ffn.norm, x), matvec_weights)
        x = x + _linear(ffn.down, ffn.act(up), matvec_weights)
    return _linear(model.lm_head, _layer_norm(model.norm, x), matvec_weights)[:, -1]  # (B, V)

"""An int8 KV cache: each key and value vector stored as 8-bit integers with one scale.

Used in chapter 07.

Per head and per token (one scale per ``(batch, head, position)`` vector of ``d_head`` numbers), symmetric absmax:

    scale = max_i |x_i| / 127,    q = round(x / scale) in [-127, 127],    x ~ scale * q

Rounding to the nearest integer moves each element by at most half a step: ``|x - scale * q| <= scale / 2``.
A vector then costs ``d_head`` bytes plus its fp32 scale (4 bytes) instead of ``d_head x 4`` (fp32) or
``d_head x 2`` (bf16/fp16) bytes: ``quantized_kv_cache_bytes`` is the closed form.

Serving systems quantize the cache more cleverly (KIVI, Liu et al. 2024: keys per channel, values per token, a
window of recent tokens kept in float; KVQuant, Hooper et al. 2024); this is the plainest version, to measure what
8 bits cost: ``kv_quantization_effect`` compares the next-token distributions of float and int8-cached decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..utils.checks import check_int, check_tensor
from .kv_cache import DynamicCache, check_kv_update

QMAX = 127  # symmetric int8: -127 .. 127 (-128 unused, so that q and -q are both representable)
SCALE_BYTES = 4  # scales are kept in fp32


def quantize_kv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x: (..., d_head)`` float -> ``(q: (..., d_head) int8, scale: (..., 1) fp32)``, one scale per vector."""
    check_tensor("x", x, shape=(..., "d_head"), floating=True)
    x = x.float()
    scale = x.abs().amax(dim=-1, keepdim=True) / QMAX  # (..., 1); 0 for an all-zero vector
    q = torch.round(x / scale.clamp_min(torch.finfo(torch.float32).tiny)).clamp_(-QMAX, QMAX)  # no 0/0
    return q.to(torch.int8), scale


def dequantize_kv(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``scale * q`` in ``dtype``: ``(..., d_head)``."""
    return (q.float() * scale).to(dtype)


class QuantizedCache:
    """A concatenating cache (as ``kv_cache.DynamicCache``) that stores int8 keys/values and fp32 scales.

    ``update`` quantizes the new ``k, v: (B, H_kv, T_new, d_head)``, appends them, and returns every position so
    far dequantized to ``k``'s dtype, ``(B, H_kv, past + T_new, d_head)``: attention always reads the int8 values,
    the newest token's included. (Clarity over speed: the whole past is dequantized at every step.)
    """

    def __init__(self):
        self.keys: list[torch.Tensor] = []  # int8 (B, H_kv, T, d_head) per layer
        self.values: list[torch.Tensor] = []
        self.key_scales: list[torch.Tensor] = []  # fp32 (B, H_kv, T, 1) per layer
        self.value_scales: list[torch.Tensor] = []

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """How many positions layer ``layer_idx`` holds (0 before its first update)."""
        return self.keys[layer_idx].shape[-2] if layer_idx < len(self.keys) else 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int):
        """Store ``k, v: (B, H_kv, T_new, d_head)`` as int8; return all keys and values so far, dequantized."""
        check_int("layer_idx", layer_idx, min=0, max=len(self.keys), note=f"no layer skipped: {len(self.keys)} held")
        held = (self.keys[layer_idx], self.values[layer_idx]) if layer_idx < len(self.keys) else ()
        check_kv_update(k, v, layer_idx, *held)  # before anything is written
        (qk, sk), (qv, sv) = quantize_kv(k), quantize_kv(v)
        stores = (self.keys, self.key_scales, self.values, self.value_scales)
        if layer_idx == len(self.keys):  # first call for this layer
            for store, new in zip(stores, (qk, sk, qv, sv)):
                store.append(new)
        else:
            for store, new in zip(stores, (qk, sk, qv, sv)):
                store[layer_idx] = torch.cat([store[layer_idx], new], dim=-2)  # (B, H_kv, past + T_new, .)
        return (
            dequantize_kv(self.keys[layer_idx], self.key_scales[layer_idx], k.dtype),
            dequantize_kv(self.values[layer_idx], self.value_scales[layer_idx], v.dtype),
        )

    def nbytes(self) -> int:
        """Bytes held: the int8 keys and values and their scales."""
        tensors = self.keys + self.values + self.key_scales + self.value_scales
        return sum(t.numel() * t.element_size() for t in tensors)


def quantized_kv_cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, seq_len: int, batch_size: int = 1) -> int:
    """Closed form: ``2 x n_layers x B x n_kv_heads x T x (d_head x 1 byte + 4 bytes of scale)``."""
    for name, value in (
        ("n_layers", n_layers),
        ("n_kv_heads", n_kv_heads),
        ("d_head", d_head),
        ("seq_len", seq_len),
        ("batch_size", batch_size),
    ):
        check_int(name, value, min=0)
    return 2 * n_layers * batch_size * n_kv_heads * seq_len * (d_head + SCALE_BYTES)


@dataclass
class KVQuantizationEffect:
    """How int8 keys/values change the next-token distributions, over ``positions`` decoding steps."""

    kl_mean: float  # mean KL(float || int8) in nats
    kl_max: float
    top1_agreement: float  # fraction of steps whose most likely next token is the same
    positions: int
    float_bytes: int  # the float cache's bytes after the last step
    int8_bytes: int


@torch.inference_mode()
def kv_quantization_effect(model, ids: torch.Tensor, prefill: int = 1) -> KVQuantizationEffect:
    """Decode ``ids: (B, T)`` token by token (teacher forcing) with a float and an int8 cache; compare each step.

    Both runs read the prompt ``ids[:, :prefill]`` in one pass, then feed the remaining tokens one at a time, so
    they see the same tokens and differ only in the cache. Returns KL(p_float || p_int8) per step (mean and max),
    the fraction of steps where both predict the same top token, and the two caches' bytes.
    """
    check_tensor("ids", ids, shape=("B", "T"), dtype=(torch.long, torch.int), note="token ids")
    check_int("prefill", prefill, 1, ids.shape[1] - 1, note=f"T={ids.shape[1]}: at least one token left to decode")
    runs = []
    for cache in (DynamicCache(), QuantizedCache()):
        steps = [model(ids[:, :prefill], cache=cache)[0][:, -1]]  # (B, V) after the prompt
        steps += [model(ids[:, t : t + 1], cache=cache)[0][:, -1] for t in range(prefill, ids.shape[1] - 1)]
        runs.append((torch.stack(steps, dim=1).float().log_softmax(-1), cache.nbytes()))  # (B, steps, V)
    (log_p, float_bytes), (log_q, int8_bytes) = runs
    kl = F.kl_div(log_q, log_p, log_target=True, reduction="none").sum(-1)  # (B, steps): KL(p || q)
    agree = (log_p.argmax(-1) == log_q.argmax(-1)).float()
    return KVQuantizationEffect(
        float(kl.mean()), float(kl.max()), float(agree.mean()), kl.numel(), float_bytes, int8_bytes
    )

"""KV caches: keep each layer's keys and values so a new token attends without recomputing the past.

Used in chapters 07 and 11.

A cache is an object threaded through the layers (as Hugging Face's ``Cache`` in ``modeling_llama.py``): each
``CachedSelfAttention`` (``blocks/cached_attention.py``) calls ``cache.update(k, v, layer_idx)`` with its new
keys/values ``(B, H_kv, T_new, d_head)`` and attends over what it gets back ``(B, H_kv, past + T_new, d_head)``.

* ``DynamicCache`` grows by concatenation (simple; copies the whole past at every step).
* ``StaticCache`` preallocates ``max_len`` slots and writes in place (no copy of the past, fixed buffers).
* ``SlidingWindowCache`` keeps only the last ``window`` positions, for a model with sliding-window attention
  (``GPTConfig(window=...)``): older keys are never attended again, so its memory stops growing.

Every cache checks an update (``check_kv_update``: the batch size, heads and head size it holds) before it writes
anything, so an update it refuses leaves it as it was.

Elsewhere: ``paged_cache.PagedKVCache`` (fixed-size blocks shared by many sequences) and
``quantized_cache.QuantizedCache`` (int8 keys and values).

Memory: ``2 (K and V) x n_layers x B x n_kv_heads x d_head x T x bytes_per_element`` (``kv_cache_bytes``),
printed in binary units by ``human_bytes`` (the twin of the chapter's calculator, ``viz/js/kvcache.js``).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from functools import partial
from typing import Sequence

import torch

from ..utils.checks import check_int, check_number, check_sequence, check_tensor


def check_kv_update(k, v, layer_idx: int, held_k=None, held_v=None) -> None:
    """What every cache checks before it writes anything: ``k, v: (B, H_kv, T_new, d_head)`` tensors that share
    ``(B, H_kv, T_new)`` and, when layer ``layer_idx`` already holds keys ``held_k`` and values ``held_v``
    ``(B, H_kv, T, d_head)``, have their batch size, heads and head size."""
    # floating: an integer or complex k would be stored (or cast) silently
    check_tensor("k", k, shape=("B", "H_kv", "T_new", "d_head"), floating=True)
    check_tensor("v", v, shape=(*k.shape[:3], None), floating=True, note="k's (B, H_kv, T_new)")
    if (
        held_k is None
        or k.shape[:2] == held_k.shape[:2]
        and (k.shape[3], v.shape[3]) == (held_k.shape[3], held_v.shape[3])
    ):
        return  # the common case, decided in one comparison; the checks below say what differs
    note = f"layer {layer_idx}'s (B, H_kv, T, d_head): a cache serves one batch, start a new cache for a new batch"
    check_tensor("k", k, shape=(held_k.shape[0], held_k.shape[1], None, held_k.shape[3]), note=note)
    check_tensor("v", v, shape=(held_v.shape[0], held_v.shape[1], None, held_v.shape[3]), note=note)


class DynamicCache:
    """Concatenating cache: one growing ``(B, H_kv, T, d_head)`` tensor pair per layer."""

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """How many positions layer ``layer_idx`` holds (0 before its first update)."""
        return self.keys[layer_idx].shape[-2] if layer_idx < len(self.keys) else 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int):
        """Append ``k, v: (B, H_kv, T_new, d_head)``; return the layer's keys and values so far."""
        check_int("layer_idx", layer_idx, min=0, max=len(self.keys), note=f"no layer skipped: {len(self.keys)} held")
        held = (self.keys[layer_idx], self.values[layer_idx]) if layer_idx < len(self.keys) else ()
        check_kv_update(k, v, layer_idx, *held)  # before anything is written
        if layer_idx == len(self.keys):  # first call for this layer
            # copies: k and v are often views of the layer's whole q|k|v projection, which would stay alive
            self.keys.append(k.clone(memory_format=torch.contiguous_format))
            self.values.append(v.clone(memory_format=torch.contiguous_format))
        else:
            self.keys[layer_idx] = torch.cat([self.keys[layer_idx], k], dim=-2)  # (B, H_kv, past + T, d_head)
            self.values[layer_idx] = torch.cat([self.values[layer_idx], v], dim=-2)
        return self.keys[layer_idx], self.values[layer_idx]

    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


class SlidingWindowCache:
    """Keeps the last ``window`` keys/values per layer: ``(B, H_kv, <= window, d_head)``.

    For a model whose attention sees only the ``window`` most recent positions (itself included): a new token
    needs the ``window - 1`` before it, so the positions older than ``window`` are dropped after each update.
    ``get_seq_length`` counts every position seen (for positions and RoPE), ``held(layer)`` what is kept.
    ``update`` returns the kept past plus the new keys, contiguous positions ending at the newest, so the model's
    band mask (aligned to the end of the keys) selects the right ones. No key-padding masks, no ALiBi (their
    shapes count every position seen).
    """

    def __init__(self, window: int):
        check_int("window", window, min=1, note="the model's GPTConfig.window")
        self.window = window
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.seen: list[int] = []

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Positions layer ``layer_idx`` has seen (kept or dropped)."""
        return self.seen[layer_idx] if layer_idx < len(self.seen) else 0

    def held(self, layer_idx: int = 0) -> int:
        """Positions layer ``layer_idx`` keeps (at most ``window``)."""
        return self.keys[layer_idx].shape[-2] if layer_idx < len(self.keys) else 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int):
        """Append ``k, v: (B, H_kv, T_new, d_head)``; return ``(B, H_kv, held + T_new, d_head)``, then keep the last
        ``window``."""
        check_int("layer_idx", layer_idx, min=0, max=len(self.keys), note=f"no layer skipped: {len(self.keys)} held")
        held = (self.keys[layer_idx], self.values[layer_idx]) if layer_idx < len(self.keys) else ()
        check_kv_update(k, v, layer_idx, *held)  # before anything is written
        if layer_idx == len(self.keys):  # first call for this layer
            full_k, full_v = k, v
            self.keys.append(k)
            self.values.append(v)
            self.seen.append(0)
        else:
            full_k = torch.cat([self.keys[layer_idx], k], dim=-2)  # (B, H_kv, held + T_new, d_head)
            full_v = torch.cat([self.values[layer_idx], v], dim=-2)
        # copies, so that no view keeps a long prompt's (or the qkv projection's) storage alive
        self.keys[layer_idx] = full_k[..., -self.window :, :].clone(memory_format=torch.contiguous_format)
        self.values[layer_idx] = full_v[..., -self.window :, :].clone(memory_format=torch.contiguous_format)
        self.seen[layer_idx] += k.shape[-2]
        return full_k, full_v

    def nbytes(self) -> int:
        """Bytes held by the kept keys and values."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


def _per_layer(value, n_layers: int, name: str) -> list[int]:
    """``value``, one int >= 1 or a list or tuple of one per layer, as a list of ``n_layers`` ints."""
    if not isinstance(value, (list, tuple)):  # one size for every layer
        value = [check_int(name, value, min=1, note=f"or a list of one per layer ({n_layers})")] * n_layers
    return list(check_sequence(name, value, length=n_layers, note="one per layer", items=partial(check_int, min=1)))


class StaticCache:
    """Preallocated cache: fixed ``(B, H_kv, max_len, d_head)`` buffers per layer, written in place.

    ``lengths[layer]`` counts the filled positions; ``update`` returns views of the filled part; ``crop(length)``
    rewinds to the first ``length`` positions (to decode again from there, e.g. after a rejected draft).
    ``n_kv_heads`` and ``d_head`` may be one int or one per layer (a model with pruned heads).
    """

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        n_kv_heads: int | Sequence[int],
        max_len: int,
        d_head: int | Sequence[int],
        device=None,
        dtype=torch.float32,
    ):
        for name, value in (("n_layers", n_layers), ("batch_size", batch_size), ("max_len", max_len)):
            check_int(name, value, min=1)
        heads, dims = _per_layer(n_kv_heads, n_layers, "n_kv_heads"), _per_layer(d_head, n_layers, "d_head")
        shapes = [(batch_size, h, max_len, d) for h, d in zip(heads, dims)]
        self.keys = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.values = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.lengths = [0] * n_layers
        self.max_len = max_len

    @classmethod
    def for_model(cls, model, batch_size: int, max_len: int | None = None, dtype=None) -> "StaticCache":
        """A cache sized for a ``GPT``: each block's kv heads and head size, the model's device and dtype."""
        attns = [block.self_attn for block in model.blocks]
        p = model.tok_emb.weight
        return cls(
            len(attns),
            batch_size,
            [a.n_kv_heads for a in attns],
            max_len or model.cfg.block_size,
            [a.d_head for a in attns],
            device=p.device,
            dtype=dtype or p.dtype,
        )

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """How many positions layer ``layer_idx`` holds."""
        return self.lengths[layer_idx]

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int):
        """Write ``k, v: (B, H_kv, T_new, d_head)`` into the next free slots; return views of the filled part."""
        check_int("layer_idx", layer_idx, min=0, max=len(self.keys) - 1, note="the cache's layers")
        buf_k, buf_v = self.keys[layer_idx], self.values[layer_idx]
        check_kv_update(k, v, layer_idx, buf_k, buf_v)  # before anything is written
        start, t = self.lengths[layer_idx], k.shape[-2]
        check_int(
            "k.shape[-2]", t, max=self.max_len - start, note=f"new positions; {start} of max_len={self.max_len} held"
        )
        buf_k.narrow(2, start, t).copy_(k)  # slots start .. start + t - 1
        buf_v.narrow(2, start, t).copy_(v)
        self.lengths[layer_idx] = start + t
        return buf_k.narrow(2, 0, start + t), buf_v.narrow(2, 0, start + t)  # (B, H_kv, past + T, d_head)

    def crop(self, length: int) -> None:
        """Forget every position from ``length`` on, in every layer, as Hugging Face's ``Cache.crop`` does: the next
        ``update`` writes at position ``length``. A negative ``length`` removes that many positions from the end; a
        cache that holds no more than ``length`` positions is left as it is. Nothing is copied: the slots past the
        new length are never read again and the next update overwrites them."""
        held = self.lengths[0]
        check_int("length", length, min=-held, note=f"positions to keep; negative: to remove, of the {held} held")
        keep = held + length if length < 0 else length
        self.lengths[:] = [min(n, keep) for n in self.lengths]

    def nbytes(self) -> int:
        """Bytes allocated for keys and values (all ``max_len`` slots, filled or not)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


def kv_cache_bytes(
    n_layers: int, n_kv_heads: int, d_head: int, seq_len: int, batch_size: int = 1, bytes_per_element: int = 2
) -> int:
    """Closed form: ``2 x n_layers x B x n_kv_heads x d_head x T x bytes`` (2: one K and one V).

    ``bytes_per_element``: 2 for fp16/bf16 (the default, as models are usually served), 4 for fp32.
    """
    for name, value in (
        ("n_layers", n_layers),
        ("n_kv_heads", n_kv_heads),
        ("d_head", d_head),
        ("seq_len", seq_len),
        ("batch_size", batch_size),
        ("bytes_per_element", bytes_per_element),
    ):
        check_int(name, value, min=0)
    return 2 * n_layers * batch_size * n_kv_heads * d_head * seq_len * bytes_per_element


def human_bytes(n) -> str:
    """``1536 -> "1.5 KiB"``: bytes in binary units (B, KiB, MiB, GiB), one decimal, thousands separated.

    The same strings as ``human`` in ``viz/js/kvcache.js`` (the chapter's live calculator), which rounds a tie
    away from zero (``1280 -> "1.3 KiB"``), where Python's own formatting would round it to even ("1.2")."""
    value = check_number("n", n, min=0, note="bytes")
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            break
        value /= 1024
    rounded = Decimal(value).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)  # the float's exact value, as JS rounds
    return f"{rounded:,.1f} {unit}"

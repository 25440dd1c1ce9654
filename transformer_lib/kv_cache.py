"""KV caches: keep each layer's keys and values so a new token attends without recomputing the past.

A cache is an object threaded through the layers (as Hugging Face's ``Cache`` in ``modeling_llama.py``):
each ``MultiHeadAttention`` calls ``cache.update(k, v, layer_idx)`` with its new keys/values
``(B, H_kv, T_new, d_head)`` and attends over what it gets back ``(B, H_kv, past + T_new, d_head)``.

* ``DynamicCache`` grows by concatenation (simple; reallocates every step).
* ``StaticCache`` preallocates ``max_len`` slots and writes in place (no reallocation, fixed shapes).

Memory: ``2 (K and V) x n_layers x B x n_kv_heads x d_head x T x bytes_per_element``.
"""
from __future__ import annotations

import torch


class DynamicCache:
    """Concatenating cache: one growing ``(B, H_kv, T, d_head)`` tensor pair per layer."""

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[-2] if layer_idx < len(self.keys) else 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int):
        if layer_idx == len(self.keys):  # first call for this layer
            self.keys.append(k)
            self.values.append(v)
        elif layer_idx < len(self.keys):
            self.keys[layer_idx] = torch.cat([self.keys[layer_idx], k], dim=-2)  # (B, H_kv, past + T, d_head)
            self.values[layer_idx] = torch.cat([self.values[layer_idx], v], dim=-2)
        else:
            raise ValueError(f"layer_idx={layer_idx} skips layers: the cache holds {len(self.keys)} so far")
        return self.keys[layer_idx], self.values[layer_idx]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


class StaticCache:
    """Preallocated cache: fixed ``(B, H_kv, max_len, d_head)`` buffers per layer written in place.

    ``lengths[layer]`` counts the filled positions; ``update`` returns views of the filled part.
    """

    def __init__(self, n_layers: int, batch_size: int, n_kv_heads: int, max_len: int, d_head: int,
                 device=None, dtype=torch.float32):
        shape = (batch_size, n_kv_heads, max_len, d_head)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.lengths = [0] * n_layers
        self.max_len = max_len

    @classmethod
    def for_model(cls, model, batch_size: int, max_len: int | None = None, dtype=None) -> "StaticCache":
        """A cache sized for a ``GPT`` (its layers, kv heads and head size, device and dtype)."""
        c = model.cfg
        p = next(model.parameters())
        n_kv = getattr(c, "n_kv_heads", None) or c.n_heads
        return cls(c.n_layers, batch_size, n_kv, max_len or c.block_size, c.d_model // c.n_heads,
                   device=p.device, dtype=dtype or p.dtype)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.lengths[layer_idx]

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int):
        start, t = self.lengths[layer_idx], k.shape[-2]
        if start + t > self.max_len:
            raise ValueError(f"StaticCache is full: {start} cached + {t} new > max_len={self.max_len}")
        if k.shape[0] != self.keys[layer_idx].shape[0] or k.shape[1] != self.keys[layer_idx].shape[1]:
            raise ValueError(f"k of shape {tuple(k.shape)} does not fit the cache's (B, H_kv) = "
                             f"{tuple(self.keys[layer_idx].shape[:2])}")
        self.keys[layer_idx][:, :, start:start + t] = k
        self.values[layer_idx][:, :, start:start + t] = v
        self.lengths[layer_idx] = start + t
        return self.keys[layer_idx][:, :, :start + t], self.values[layer_idx][:, :, :start + t]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


def kv_cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, seq_len: int, batch_size: int = 1,
                   bytes_per_element: int = 2) -> int:
    """Closed form: ``2 x n_layers x B x n_kv_heads x d_head x T x bytes``."""
    return 2 * n_layers * batch_size * n_kv_heads * d_head * seq_len * bytes_per_element

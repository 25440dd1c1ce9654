"""Serving a decoder: generating text, and the caches that make each new token cheap.

This package's face gathers every public name of its modules (``from transformer_lib import serving``, then
``serving.generate``, ``serving.StaticCache``); each concept lives in its own module, where its documentation is:

* ``generation``: ``generate`` (greedy, temperature, top-k and top-p sampling; the prefill, then one token per step)
  and its sampling pieces (``filter_logits``, ``sample_next``);
* ``decoding``: one token through the model's own forward, checked (``decode_step``), and why a model cannot use a
  cache (``cache_refusal``, ``check_cacheable``);
* ``weight_layout``: the linear weights stored in the order a one-token product reads fastest, in place, once per
  model (``pack_for_decoding``, ``is_packed``, and ``unpack_weights`` for code that needs them contiguous);
* ``kv_cache``: the caches threaded through the layers, ``DynamicCache`` (concatenation), ``StaticCache``
  (preallocated) and ``SlidingWindowCache`` (the last ``window`` positions), the check each makes before it
  writes (``check_kv_update``), their bytes (``kv_cache_bytes``) and how a byte count reads (``human_bytes``, the
  twin of the live calculator's formatter);
* ``paged_cache``: ``PagedKVCache``, fixed-size blocks shared by many sequences (vLLM's PagedAttention);
* ``continuous_batching``: ``serve``, a toy of continuous batching of requests (``Request``) over a paged cache;
* ``quantized_cache``: ``QuantizedCache``, keys and values stored as int8 with one scale per vector, and what that
  does to a model's next-token distributions (``kv_quantization_effect``);
* ``seq2seq``: decoding with an encoder-decoder ``Transformer`` (``greedy_decode``, ``beam_search``, ``translate``)
  and scoring its translations (``exact_match``).

The module holding ``generate`` is ``generation`` (as in Hugging Face's ``transformers.generation``), so that
``transformer_lib.serving.generate`` names one thing: the function.
"""

from __future__ import annotations

from .continuous_batching import Request, serve
from .decoding import cache_refusal, check_cacheable, decode_step
from .generation import CACHE_IMPLEMENTATIONS, filter_logits, generate, sample_next
from .kv_cache import DynamicCache, SlidingWindowCache, StaticCache, check_kv_update, human_bytes, kv_cache_bytes
from .paged_cache import PagedKVCache, memory_held
from .seq2seq import beam_search, exact_match, greedy_decode, translate
from .weight_layout import is_packed, pack_for_decoding, unpack_weights
from .quantized_cache import (
    QMAX,
    SCALE_BYTES,
    KVQuantizationEffect,
    QuantizedCache,
    dequantize_kv,
    kv_quantization_effect,
    quantize_kv,
    quantized_kv_cache_bytes,
)

__all__ = [
    "CACHE_IMPLEMENTATIONS",
    "DynamicCache",
    "KVQuantizationEffect",
    "PagedKVCache",
    "QMAX",
    "QuantizedCache",
    "Request",
    "SCALE_BYTES",
    "SlidingWindowCache",
    "StaticCache",
    "beam_search",
    "cache_refusal",
    "check_cacheable",
    "check_kv_update",
    "decode_step",
    "dequantize_kv",
    "exact_match",
    "filter_logits",
    "generate",
    "greedy_decode",
    "human_bytes",
    "is_packed",
    "kv_cache_bytes",
    "kv_quantization_effect",
    "memory_held",
    "pack_for_decoding",
    "quantize_kv",
    "quantized_kv_cache_bytes",
    "sample_next",
    "serve",
    "translate",
    "unpack_weights",
]

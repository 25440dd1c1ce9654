"""Chapter 08's speed measurement: does a pruned model run faster? (also ``benchmarks/bench_compression.py``)

Used in chapter 08.

* ``pruned_speeds``: forward and greedy-decoding throughput of several variants of a model, some with heads
  masked by ``pruning.head_mask``, timed round-robin in one run.
* ``csr_vs_dense``: a weight matrix with a share of its entries set to zero, multiplied as a sparse CSR matrix
  and as a dense one.
Compare ratios measured in the same call, never absolute times from different runs.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Sequence

import torch
import torch.nn as nn

from ..generate import generate
from ..pruning import head_mask
from ..timing import interleaved_medians


def pruned_speeds(variants: dict[str, tuple[nn.Module, torch.Tensor | None]], prompt: torch.Tensor,
                  batch: torch.Tensor, new_tokens: int = 64, repeats: int = 5,
                  device=None) -> dict[str, tuple[float, float]]:
    """``{name: (forward tokens/s, decode tokens/s)}`` for ``variants: {name: (model, mask or None)}``.

    ``batch: (B, T)`` token ids for the forward pass; ``prompt: (1, T0)`` for greedy decoding of ``new_tokens``
    tokens (``generate``'s default static KV cache). ``mask: (n_layers, n_heads)`` gates heads while timing.
    """
    def timed(model, mask, fn):
        def call():
            with torch.inference_mode(), (head_mask(model, mask) if mask is not None else contextlib.nullcontext()):
                return fn(model)
        return call
    fns = {}
    for name, (model, mask) in variants.items():
        fns[name, "fwd"] = timed(model, mask, lambda m: m(batch))
        fns[name, "dec"] = timed(model, mask, lambda m: generate(m, prompt, new_tokens))
    t = interleaved_medians(fns, repeats=repeats, warmup=1, device=device)
    return {name: (batch.numel() / t[name, "fwd"], new_tokens / t[name, "dec"]) for name in variants}


def csr_vs_dense(w: torch.Tensor, x: torch.Tensor, sparsities: Sequence[float] = (0.5, 0.9, 0.99),
                 repeats: int = 15, device=None) -> list[tuple[float, float, float]]:
    """``[(sparsity, dense seconds, CSR seconds)]`` for ``w' @ x``, where ``w'`` is ``w: (out, in)`` with its
    smallest ``sparsity`` share of entries set to zero; ``x: (in, tokens)``."""
    rows = []
    for s in sparsities:
        ws = w * (w.abs() > w.abs().flatten().quantile(s))  # (out, in), the smallest s of the weights zeroed
        with warnings.catch_warnings():  # "sparse CSR support is in beta": known, and the point of the measurement
            warnings.simplefilter("ignore", UserWarning)
            csr = ws.to_sparse_csr()
        with torch.inference_mode():
            t = interleaved_medians({"dense": lambda: ws @ x, "csr": lambda: csr @ x}, repeats=repeats, device=device)
        rows.append((s, t["dense"], t["csr"]))
    return rows

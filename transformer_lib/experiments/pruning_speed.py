"""Chapter 08's speed measurement: does a pruned model run faster? (also ``benchmarks/bench_compression.py``)

Used in chapter 08.

* ``pruned_speeds``: forward and greedy-decoding throughput of several variants of a model, some with heads
  masked by ``pruning.head_mask``, timed round-robin in one run.
* ``csr_vs_dense``: a weight matrix with a share of its entries set to zero, multiplied as a sparse CSR matrix
  and as a dense one.
* ``pruned_times`` and ``csr_dense_times``: the same measurements with every round's seconds kept, so that
  ``speed_ratio`` can give a variant's speed relative to a reference with an interval (``timing.ratio_from_times``)
  and ``speed_verdict`` can say whether it was faster, slower, or within the run's noise.
Compare ratios measured in the same call, never absolute times from different runs.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Sequence

import torch
import torch.nn as nn

from ..compression.pruning import head_mask
from ..serving.generation import generate
from ..book_tools.timing import Ratio, interleaved_medians, interleaved_times, ratio_from_times


def _timed_calls(variants, prompt, batch, new_tokens):
    """``{(name, "fwd"|"dec"): zero-argument callable}``: a forward pass of ``batch`` and a greedy decode of
    ``new_tokens`` after ``prompt``, each under the variant's head mask (if any), without autograd."""

    def timed(model, mask, fn):
        def call():
            with torch.inference_mode(), head_mask(model, mask) if mask is not None else contextlib.nullcontext():
                return fn(model)

        return call

    fns = {}
    for name, (model, mask) in variants.items():
        fns[name, "fwd"] = timed(model, mask, lambda m: m(batch))
        fns[name, "dec"] = timed(model, mask, lambda m: generate(m, prompt, new_tokens))
    return fns


def pruned_times(
    variants: dict[str, tuple[nn.Module, torch.Tensor | None]],
    prompt: torch.Tensor,
    batch: torch.Tensor,
    new_tokens: int = 32,
    repeats: int = 9,
    device=None,
) -> dict[str, dict[str, list[float]]]:
    """``{name: {"fwd": [seconds per round], "dec": [...]}}``: the measurement of ``pruned_speeds`` with every
    round kept (``timing.interleaved_times``: round ``r`` of every list was timed in the same pass), for
    ``speed_ratio``. ``batch: (B, T)`` ids for the forward pass; ``prompt: (1, T0)`` for greedy decoding."""
    t = interleaved_times(_timed_calls(variants, prompt, batch, new_tokens), repeats=repeats, warmup=1, device=device)
    return {name: {"fwd": t[name, "fwd"], "dec": t[name, "dec"]} for name in variants}


def speed_ratio(times_variant: list[float], times_reference: list[float]) -> Ratio:
    """The variant's speed relative to the reference's, from paired rounds: the median of ``t_ref / t_variant``
    round by round, with its 95% interval (``> 1``: the variant ran faster). ``str()`` prints both."""
    return ratio_from_times(times_reference, times_variant)


def speed_verdict(speed: Ratio) -> str:
    """``"faster"`` when ``speed``'s interval (a ``speed_ratio``) lies above 1, ``"slower"`` when below,
    else ``"within_noise"``: the key a chapter's prose maps to its words."""
    return "faster" if speed.low > 1.0 else "slower" if speed.high < 1.0 else "within_noise"


def pruned_speeds(
    variants: dict[str, tuple[nn.Module, torch.Tensor | None]],
    prompt: torch.Tensor,
    batch: torch.Tensor,
    new_tokens: int = 64,
    repeats: int = 5,
    device=None,
) -> dict[str, tuple[float, float]]:
    """``{name: (forward tokens/s, decode tokens/s)}`` for ``variants: {name: (model, mask or None)}``.

    ``batch: (B, T)`` token ids for the forward pass; ``prompt: (1, T0)`` for greedy decoding of ``new_tokens``
    tokens (``generate``'s default static KV cache). ``mask: (n_layers, n_heads)`` gates heads while timing.
    """
    t = interleaved_medians(_timed_calls(variants, prompt, batch, new_tokens), repeats=repeats, warmup=1, device=device)
    return {name: (batch.numel() / t[name, "fwd"], new_tokens / t[name, "dec"]) for name in variants}


def csr_vs_dense(
    w: torch.Tensor, x: torch.Tensor, sparsities: Sequence[float] = (0.5, 0.9, 0.99), repeats: int = 15, device=None
) -> list[tuple[float, float, float]]:
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


def csr_dense_times(
    w: torch.Tensor,
    x: torch.Tensor,
    sparsities: Sequence[float] = (0.5, 0.9, 0.99),
    repeats: int = 15,
    calls: int = 1,
    device=None,
) -> list[tuple[float, list[float], list[float]]]:
    """``[(sparsity, dense seconds per round, CSR seconds per round)]``: ``csr_vs_dense`` with every round kept
    (paired, for ``speed_ratio``); each timing runs the product ``calls`` times (a product of about a millisecond
    alone is at the mercy of the scheduler on a busy machine)."""
    rows = []
    for s in sparsities:
        ws = w * (w.abs() > w.abs().flatten().quantile(s))  # (out, in), the smallest s of the weights zeroed
        with warnings.catch_warnings():  # "sparse CSR support is in beta": known, and the point of the measurement
            warnings.simplefilter("ignore", UserWarning)
            csr = ws.to_sparse_csr()
        with torch.inference_mode():
            t = interleaved_times(
                {"dense": lambda: [ws @ x for _ in range(calls)], "csr": lambda: [csr @ x for _ in range(calls)]},
                repeats=repeats,
                device=device,
            )
        rows.append((s, t["dense"], t["csr"]))
    return rows

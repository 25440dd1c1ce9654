"""Chapter 07's batching experiment: decoding throughput against batch size, and why it grows.

Used in chapter 07.

One decoding step multiplies every weight matrix by one vector per row: about 2 FLOPs per weight per row. The
weights are read from memory once per step whatever the batch size, while each row also reads its own cached keys
and values. So the step's *arithmetic intensity* (FLOPs per byte moved) is, with ``N`` matrix weights of ``w``
bytes and ``kv(T)`` the cache bytes of one row at context ``T``:

    intensity(B) = B (2 N + attention FLOPs(T)) / (N w + B kv(T))

While ``N w`` dominates the bytes, intensity grows in proportion to ``B``: a batch of 8 does 8 times the work for
about the same bytes, so tokens per second grow almost 8-fold (decoding is bound by memory bandwidth). Once the
intensity reaches the machine's balance point (its peak FLOP/s over its bandwidth), arithmetic is the limit and
larger batches stop paying (Williams et al. 2009, the roofline model).

``decode_step_cost`` is that closed form for a ``GPT``; ``decode_throughput`` measures tokens per second of the
decoding steps for several batch sizes, prompts of different lengths left-padded as chapter 06 shows (``left_pad``).
"""

from __future__ import annotations

import statistics
from functools import partial

import torch

from ..utils.checks import check_int, check_sequence
from ..serving.kv_cache import kv_cache_bytes
from ..book_tools.timing import interleaved_times
from .left_padding import left_pad
from ..serving.weight_layout import pack_for_decoding
from .prefill_decode import decode_steps, matrix_weights, prefill


def decode_step_cost(cfg, batch_size: int, context_len: int, bytes_per_element: int = 4) -> dict:
    """FLOPs and bytes of one decoding step of a ``GPT`` with config ``cfg``: ``batch_size`` rows, each attending
    over ``context_len`` cached positions (its new token included).

    Counts the matrix multiplications (q/k/v, output, FFN and head projections; norms, biases, softmax and the
    embedding lookup are left out) and attention (``4 x n_layers x n_heads x d_head x T`` per row: scores and the
    weighted sum, over every cached position). Bytes: every matrix once (a tied head read once) and each row's
    cached keys and values.
    """
    for name, value in (
        ("batch_size", batch_size),
        ("context_len", context_len),
        ("bytes_per_element", bytes_per_element),
    ):
        check_int(name, value, min=1)
    d, d_head = cfg.d_model, cfg.d_head
    kv_heads = cfg.n_heads if cfg.n_kv_heads is None else cfg.n_kv_heads
    weights = matrix_weights(cfg)  # qkv, out, up, down in every layer, and the head
    attention = 4 * cfg.n_layers * d * context_len  # per row: q k^T and weights @ v, every head
    flops = batch_size * (2 * weights + attention)
    kv = kv_cache_bytes(cfg.n_layers, kv_heads, d_head, context_len, batch_size, bytes_per_element)
    moved = weights * bytes_per_element + kv
    return {
        "flops": flops,
        "matrix_weights": weights,
        "weight_bytes": weights * bytes_per_element,
        "kv_bytes": kv,
        "intensity": flops / moved,
    }


def decode_throughput(
    model, batch_sizes, prompt_lengths=(4, 9, 16, 25), new_tokens: int = 32, repeats: int = 5, seed: int = 0
) -> list[dict]:
    """Greedy-decoding tokens per second of the decoding steps (``decoding.decode_step``) for each batch size.

    Row ``i`` of a batch gets a random prompt of length ``prompt_lengths[i % len(prompt_lengths)]``, left-padded.
    Each batch is prefilled once (``prefill_decode.prefill``, untimed), then its ``new_tokens - 1`` decoding steps
    after the prefill's token are timed, interleaved with the other batches (``timing.interleaved_times``):
    ``tok/s = B x (new_tokens - 1) / t`` at the median ``t``. Returns one dict per batch size with the measured
    ``tok_per_s``, ``decode_seconds`` (the median), ``decode_times`` (every round's seconds; round ``r`` of every
    batch measured in the same pass, pairs for ``timing.ratio_from_times``), and ``decode_step_cost`` at the longest
    ``context`` reached (padded prompt + steps).
    """
    check_int("new_tokens", new_tokens, min=2, note="one token is the prefill's")
    check_sequence("batch_sizes", batch_sizes, min_len=1, items=partial(check_int, min=1))
    device, g = model.tok_emb.weight.device, torch.Generator().manual_seed(seed)
    pack_for_decoding(model)  # the weights' layout generate decodes with (on a CPU; once per model)
    states = {}
    for b in batch_sizes:
        prompts = [
            torch.randint(0, model.cfg.vocab_size, (prompt_lengths[i % len(prompt_lengths)],), generator=g)
            for i in range(b)
        ]
        ids, mask = (t.to(device) for t in left_pad(prompts))
        states[b] = prefill(model, ids, ids.shape[1] + new_tokens, attention_mask=mask)
    times = interleaved_times(
        {b: (lambda s=s: decode_steps(model, s, new_tokens - 1)) for b, s in states.items()},
        repeats=repeats,
        warmup=1,
        device=device,
    )
    rows = []
    for b, state in states.items():
        cost = decode_step_cost(model.cfg, b, state.past + new_tokens - 1, model.tok_emb.weight.element_size())
        seconds = statistics.median(times[b])
        rows.append(
            {
                "batch": b,
                "tok_per_s": b * (new_tokens - 1) / seconds,
                "decode_seconds": seconds,
                "decode_times": times[b],
                "context": state.past + new_tokens - 1,
                **cost,
            }
        )
    return rows

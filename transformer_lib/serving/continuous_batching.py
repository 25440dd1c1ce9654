"""A toy of continuous batching over a paged KV cache (Yu et al. 2022, Orca; Kwon et al. 2023, vLLM).

Used in chapter 07.

Static batching starts a batch together and waits for its longest sequence; continuous batching decides at every
decoding step: finished sequences leave the batch (their cache blocks go back to the pool), waiting requests whose
tokens fit in the free blocks join it. One step of ``serve``:

1. admit: each request that has arrived, in arrival order, while the batch has room and the pool has the blocks
   its whole sequence will need (``prompt + max_new_tokens - 1`` positions; reserved up front, so a running
   sequence never runs out of blocks). Its prompt is run alone (the *prefill*), which gives its first new token;
2. decode: one forward pass over one new token per running sequence, rows of different lengths in one batch
   (``PagedKVCache`` pads them on the left, ``attention_mask`` hides the padding, each row keeps its position);
3. retire: a sequence that has its ``max_new_tokens`` leaves and frees its blocks.

Toy limits, said plainly: greedy decoding only, one prefill per admitted request, a Python loop per step, and
positions that a learned/sinusoidal table, ALiBi or nothing gives (RoPE rotates every row of a forward pass by one
offset, the cache's longest length, which is wrong for the shorter rows: ``serve`` refuses it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..utils.checks import check_ids, check_int, check_sequence, check_type
from .decoding import decode_step
from .paged_cache import PagedKVCache


@dataclass
class Request:
    """One sequence to serve: ``prompt: (T,)`` token ids, arriving at decoding step ``arrival``."""

    prompt: torch.Tensor
    max_new_tokens: int
    arrival: int = 0


def _check_requests(model, requests, cache: PagedKVCache) -> None:
    check_sequence("requests", requests, note="Request objects", items=Request)
    check_type("cache", cache, PagedKVCache)
    if model.cfg.positional == "rope":
        raise ValueError(
            "serve needs each row's own position; positional='rope' rotates a whole batch by one "
            "offset. Use a model with positional 'learned', 'sinusoidal', 'alibi' or 'none'"
        )
    for i, r in enumerate(requests):
        # (T,) ids, >= 1 of them, checked before any prefill touches the cache
        check_ids(f"requests[{i}].prompt", r.prompt, model.cfg.vocab_size, shape=(None,))
        check_int(f"requests[{i}].max_new_tokens", r.max_new_tokens, min=1)
        check_int(f"requests[{i}].arrival", r.arrival, min=0, note="a decoding step")
        check_int(
            f"requests[{i}]'s positions (prompt + max_new_tokens - 1)",
            len(r.prompt) + r.max_new_tokens - 1,
            max=min(model.cfg.block_size, cache.n_blocks * cache.block_size),
            note=f"the model's block_size={model.cfg.block_size}, "
            f"the pool's n_blocks={cache.n_blocks} x block_size={cache.block_size}",
        )


@torch.inference_mode()
def serve(model, requests: list[Request], cache: PagedKVCache, max_batch: int = 8):
    """Greedy-decode every request with continuous batching; returns ``(outputs, trace)``.

    ``outputs[i]``: request ``i``'s new tokens ``(max_new_tokens,)``, the ones ``generate`` would give it alone.
    ``trace``: one dict per step, ``{"step", "running" (request indices decoded), "admitted", "finished",
    "blocks_in_use", "block_tables" (copies)}``: what the batch and the pool looked like.
    """
    _check_requests(model, requests, cache)
    check_int("max_batch", max_batch, min=1)
    waiting = sorted(range(len(requests)), key=lambda i: requests[i].arrival)
    running, reserved, out, trace, step = [], {}, {i: [] for i in range(len(requests))}, [], 0
    while waiting or running:
        admitted, finished = [], []
        while waiting and requests[waiting[0]].arrival <= step and len(running) < max_batch:
            r = requests[waiting[0]]
            need = cache.blocks_for(len(r.prompt) + r.max_new_tokens - 1)
            if sum(reserved.values()) + need > cache.n_blocks:
                break  # wait for blocks; later arrivals wait behind it (first come, first served)
            i = waiting.pop(0)
            reserved[i] = need
            out[i].append(_prefill(model, cache, i, r.prompt))
            running.append(i)
            admitted.append(i)
        decoding = [i for i in running if len(out[i]) < requests[i].max_new_tokens]
        if decoding:
            for i, token in zip(decoding, _decode(model, cache, decoding, [out[i][-1] for i in decoding])):
                out[i].append(token)
        for i in list(running):
            if len(out[i]) == requests[i].max_new_tokens:
                running.remove(i)
                finished.append(i)
        trace.append(
            {
                "step": step,
                "running": decoding,
                "admitted": admitted,
                "finished": finished,
                "blocks_in_use": cache.blocks_in_use(),
                "block_tables": {i: list(t) for i, t in cache.block_tables.items()},
            }
        )
        for i in finished:
            cache.free_sequence(i)
            del reserved[i]
        step += 1
    return [torch.tensor(out[i], dtype=torch.long) for i in range(len(requests))], trace


def _prefill(model, cache: PagedKVCache, seq_id, prompt: torch.Tensor) -> int:
    """Run ``prompt: (T,)`` alone into fresh blocks; its greedy next token."""
    cache.add_sequence(seq_id)
    cache.set_active([seq_id])
    logits = model(prompt[None].to(cache.key_pools[0].device), cache=cache)[0][:, -1]  # (1, V)
    return int(logits.argmax(-1))


def _decode(model, cache: PagedKVCache, seq_ids: list, tokens: list[int]) -> list[int]:
    """One new token for each of ``seq_ids`` in one batched step; their greedy next tokens."""
    cache.set_active(seq_ids)
    device = cache.key_pools[0].device
    token = torch.tensor(tokens, dtype=torch.long, device=device)[:, None]  # (B, 1)
    logits = decode_step(model, token, cache, position=cache.positions(), attention_mask=cache.attention_mask(1))
    return logits.argmax(-1).tolist()  # (B,)

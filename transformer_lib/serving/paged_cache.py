"""A paged KV cache: fixed-size blocks shared by many sequences (Kwon et al. 2023, vLLM's PagedAttention).

Used in chapter 07.

A contiguous cache (``kv_cache.StaticCache``) reserves ``max_len`` positions for every row of the batch, however
short the sequence turns out to be. A paged cache cuts memory into *blocks* of ``block_size`` positions:

* each layer's keys (and values) live in one pool ``(n_blocks, H_kv, block_size, d_head)``;
* each sequence owns a *block table*, the list of its block indices: positions ``i * block_size ..
  (i + 1) * block_size - 1`` are in block ``table[i]``, so a sequence's blocks need not be adjacent;
* a block is taken from the free list only when a sequence writes past its last block, and a finished sequence's
  blocks go back to the free list, to be handed to the next sequence. At most ``block_size - 1`` positions per
  sequence sit unused (``memory_held`` compares the bytes with a contiguous cache).

The cache follows the library's convention (``kv_cache.py``): the model calls ``update(k, v, layer_idx)`` with
``k, v: (B, H_kv, T_new, d_head)``. Which sequence each of the B rows is, the caller says first with
``set_active([seq_id, ...])``. Rows of different lengths come back right-aligned (left padding, zeros) so each
row's newest key is last, as the causal mask expects; ``attention_mask(T_new)`` hides the padding and
``positions()`` gives each row's position for a learned position table (``continuous_batching.py`` uses both).

Clarity over speed: ``update`` writes and gathers with a Python loop over rows and copies each sequence's blocks
into a contiguous ``(B, H_kv, T, d_head)`` tensor for the ordinary attention. Serving engines instead read the
blocks inside the attention kernel (no copy), which is what makes paging free at run time.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Hashable, Sequence

import torch

from ..utils.checks import check_choice, check_int, check_sequence, check_tensor
from .kv_cache import kv_cache_bytes


def _check_positive(**values) -> None:
    for name, value in values.items():
        check_int(name, value, min=1)


class PagedKVCache:
    """Per-layer block pools ``(n_blocks, H_kv, block_size, d_head)`` and one block table per sequence."""

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        d_head: int,
        n_blocks: int,
        block_size: int,
        device=None,
        dtype=torch.float32,
    ):
        _check_positive(
            n_layers=n_layers, n_kv_heads=n_kv_heads, d_head=d_head, n_blocks=n_blocks, block_size=block_size
        )
        shape = (n_blocks, n_kv_heads, block_size, d_head)
        self.key_pools = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.value_pools = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.n_layers, self.n_blocks, self.block_size = n_layers, n_blocks, block_size
        self.free_blocks = list(range(n_blocks - 1, -1, -1))  # a stack: block 0 first, a freed block next
        self.block_tables: dict[Hashable, list[int]] = {}
        self.lengths: dict[Hashable, list[int]] = {}  # positions written, per layer
        self.active: list = []

    @classmethod
    def for_model(cls, model, n_blocks: int, block_size: int, dtype=None) -> "PagedKVCache":
        """Pools sized for a ``GPT`` (its kv heads, head size, device and dtype)."""
        attn = model.blocks[0].self_attn
        p = model.tok_emb.weight
        return cls(
            len(model.blocks),
            attn.n_kv_heads,
            attn.d_head,
            n_blocks,
            block_size,
            device=p.device,
            dtype=dtype or p.dtype,
        )

    # ------------------------------------------------------------------ sequences and blocks
    def add_sequence(self, seq_id: Hashable) -> None:
        """Register a new sequence, with an empty block table."""
        if seq_id in self.block_tables:
            raise ValueError(f"seq_id={seq_id!r} is already in the cache; free_sequence it first")
        self.block_tables[seq_id], self.lengths[seq_id] = [], [0] * self.n_layers

    def free_sequence(self, seq_id: Hashable) -> None:
        """Return the sequence's blocks to the free list and forget it."""
        check_choice("seq_id", seq_id, self.block_tables)  # a sequence add_sequence registered
        self.free_blocks.extend(reversed(self.block_tables.pop(seq_id)))
        del self.lengths[seq_id]
        self.active = [s for s in self.active if s != seq_id]

    def set_active(self, seq_ids: Sequence[Hashable]) -> None:
        """The sequences of the next forward pass, one per row, in row order."""
        check_sequence("seq_ids", seq_ids, unique=True, items=partial(check_choice, choices=self.block_tables))
        self.active = list(seq_ids)

    def blocks_for(self, n_tokens: int) -> int:
        """Blocks that ``n_tokens`` positions occupy: ``ceil(n_tokens / block_size)``."""
        return math.ceil(n_tokens / self.block_size)

    def blocks_in_use(self) -> int:
        return self.n_blocks - len(self.free_blocks)

    def _reserve(self, new_tokens: int, layer_idx: int) -> None:
        """Grow every active sequence's block table to hold ``new_tokens`` more positions in layer ``layer_idx``.

        All or nothing: the blocks every row needs are counted first, and only when the free list holds them all
        are any taken, so a pool that runs out for one row leaves every table (and the free list) as it was.
        """
        missing = {}
        for seq_id in self.active:
            n_tokens = self.lengths[seq_id][layer_idx] + new_tokens
            need = max(self.blocks_for(n_tokens) - len(self.block_tables[seq_id]), 0)
            free = len(self.free_blocks) - sum(missing.values())  # what the rows before this one leave
            if need > free:
                raise ValueError(
                    f"the block pool is full: seq_id={seq_id!r} needs {need} more block(s) of "
                    f"{self.block_size} positions for {n_tokens} positions, {free} of "
                    f"n_blocks={self.n_blocks} are free; free finished sequences or enlarge the pool "
                    "(no row of this update was written)"
                )
            missing[seq_id] = need
        for seq_id, need in missing.items():
            self.block_tables[seq_id].extend(self.free_blocks.pop() for _ in range(need))

    # ------------------------------------------------------------------ the cache protocol
    def get_seq_length(self, layer_idx: int = 0) -> int:
        """The longest active sequence's positions in layer ``layer_idx`` (the width rows are padded to)."""
        return max((self.lengths[s][layer_idx] for s in self.active), default=0)

    def positions(self) -> torch.Tensor:
        """``(B, 1)``: the position of each active row's next token (its length in layer 0)."""
        device = self.key_pools[0].device
        return torch.tensor([[self.lengths[s][0]] for s in self.active], dtype=torch.long, device=device)

    def attention_mask(self, new_tokens: int = 1) -> torch.Tensor:
        """``(B, past + new_tokens)`` bool, True on each row's real keys (right-aligned), after ``new_tokens``."""
        lengths = torch.tensor([self.lengths[s][0] + new_tokens for s in self.active], device=self.key_pools[0].device)
        width = self.get_seq_length(0) + new_tokens
        return torch.arange(width, device=lengths.device)[None, :] >= (width - lengths)[:, None]  # (B, width)

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int):
        """Write ``k, v: (B, H_kv, T_new, d_head)`` into the active sequences' blocks; return every active row's keys
        and values so far, right-aligned: ``(B, H_kv, longest, d_head)`` (zeros on the left of shorter rows).

        Atomic: shapes, dtype, device and the blocks of every row are checked before any row is written, so an
        update that raises leaves every sequence's length and blocks as they were (a retry after freeing blocks
        decodes what a cache that never saw the failure decodes)."""
        pool = self.key_pools[check_int("layer_idx", layer_idx, min=0, max=self.n_layers - 1)]
        B, H_kv, d_head = len(self.active), pool.shape[1], pool.shape[3]
        rows = f"B={B} active rows, H_kv={H_kv}, T_new, d_head={d_head}; the pools' dtype and device"
        check_tensor("k", k, shape=(B, H_kv, None, d_head), dtype=pool.dtype, device=pool.device, note=rows)
        check_tensor("v", v, shape=tuple(k.shape), dtype=pool.dtype, device=pool.device, note="k's shape")
        self._reserve(k.shape[2], layer_idx)  # every row's blocks, or an error before anything is written
        for row, seq_id in enumerate(self.active):
            self._write(seq_id, layer_idx, k[row], v[row])
        return self._gather(self.key_pools[layer_idx], layer_idx), self._gather(self.value_pools[layer_idx], layer_idx)

    def _write(self, seq_id, layer_idx: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """``k, v: (H_kv, T_new, d_head)`` at the sequence's next positions, block ``pos // bs``, slot ``pos % bs``."""
        start = self.lengths[seq_id][layer_idx]
        pos = torch.arange(start, start + k.shape[1], device=k.device)  # (T_new,)
        table = torch.tensor(self.block_tables[seq_id], dtype=torch.long, device=k.device)  # reserved by update
        blocks, slots = table[pos // self.block_size], pos % self.block_size  # (T_new,) each
        self.key_pools[layer_idx][blocks, :, slots] = k.transpose(0, 1)  # indexed view is (T_new, H_kv, d_head)
        self.value_pools[layer_idx][blocks, :, slots] = v.transpose(0, 1)
        self.lengths[seq_id][layer_idx] = start + k.shape[1]

    def _gather(self, pool: torch.Tensor, layer_idx: int) -> torch.Tensor:
        """Each active sequence's blocks laid end to end, right-aligned: ``(B, H_kv, longest, d_head)``."""
        longest = self.get_seq_length(layer_idx)
        out = pool.new_zeros(len(self.active), pool.shape[1], longest, pool.shape[3])
        for row, seq_id in enumerate(self.active):
            n = self.lengths[seq_id][layer_idx]
            table = self.block_tables[seq_id][: self.blocks_for(n)]
            blocks = pool[table]  # (n_blocks_used, H_kv, block_size, d_head)
            out[row, :, longest - n :] = blocks.transpose(0, 1).flatten(1, 2)[:, :n]  # (H_kv, n, d_head)
        return out

    # ------------------------------------------------------------------ memory
    def bytes_per_block(self) -> int:
        """One block in every layer, keys and values: ``2 x n_layers x H_kv x block_size x d_head x bytes``."""
        pool = self.key_pools[0]
        return 2 * self.n_layers * pool[0].numel() * pool.element_size()

    def nbytes_in_use(self) -> int:
        """Bytes of the blocks that sequences hold now."""
        return self.blocks_in_use() * self.bytes_per_block()

    def nbytes(self) -> int:
        """Bytes allocated for the whole pool (every block, in use or free)."""
        return sum(t.numel() * t.element_size() for t in self.key_pools + self.value_pools)


def memory_held(cache: PagedKVCache, max_len: int | None = None) -> dict:
    """Bytes the cache's sequences hold in blocks against a contiguous cache for the same batch.

    ``paged``: blocks in use (``nbytes_in_use``). ``contiguous``: a ``StaticCache`` with one row per sequence and
    ``max_len`` positions each (default: the longest sequence, the least a contiguous batch can reserve).
    """
    lengths = [n[0] for n in cache.lengths.values()]
    longest = max(lengths, default=0)
    max_len = longest if max_len is None else max_len
    check_int("max_len", max_len, min=longest, note="the longest sequence")
    pool = cache.key_pools[0]
    contiguous = kv_cache_bytes(
        cache.n_layers,
        pool.shape[1],
        pool.shape[3],
        max_len,
        batch_size=len(lengths),
        bytes_per_element=pool.element_size(),
    )
    return {
        "paged": cache.nbytes_in_use(),
        "contiguous": contiguous,
        "sequences": len(lengths),
        "positions": sum(lengths),
        "blocks": cache.blocks_in_use(),
    }

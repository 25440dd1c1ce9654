"""NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al. 2023): 16 levels placed at quantiles of N(0, 1), so that
weights that are roughly normal (as trained weights are) fall into each level about equally often, then scaled to
``[-1, 1]``. Each block of 64 weights is divided by its largest ``|w|`` (block-wise absmax) and every weight is
stored as the index of its nearest level.

Used in chapters 09 and 12.

The construction (the paper's Eq. 4 made asymmetric, as bitsandbytes' ``create_normal_map`` does): 8 positive
levels at the N(0,1) quantiles of probabilities equally spaced from ``offset`` down to (not including) 0.5, 7
negative levels likewise from ``1 - offset``, and an exact 0; divided by the largest. ``offset`` stands in for
probability 1, whose quantile is infinite: the mean of ``1 - 1/(2*15)`` and ``1 - 1/(2*16)``, half a step of a 15-
and of a 16-level grid. Zero is exactly representable, so padding and exact zeros stay zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..utils.checks import check_dtype, check_int, check_tensor, check_type
from .grids import fake_quantize, pack_int4, unpack_int4

NF4_OFFSET = 1 - (1 / (2 * 15) + 1 / (2 * 16)) / 2  # 0.9677083...


def nf4_code_book(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The 16 NF4 levels, sorted, from -1 to 1 with an exact 0: ``(16,)`` in ``dtype``."""
    probs_pos = torch.linspace(NF4_OFFSET, 0.5, 9, dtype=torch.float64)[:-1]  # 8 probabilities above 0.5
    probs_neg = torch.linspace(NF4_OFFSET, 0.5, 8, dtype=torch.float64)[:-1]  # 7, mirrored below 0.5
    levels = torch.cat(
        [torch.special.ndtri(probs_pos), torch.zeros(1, dtype=torch.float64), -torch.special.ndtri(probs_neg)]
    )
    levels = levels.sort().values
    return (levels / levels.max()).to(dtype)


@dataclass
class NF4Tensor:
    """NF4 storage: ``codes`` two 4-bit level indices per byte ``(numel // 2,)`` uint8, ``absmax`` one float32 per
    block ``(numel // block_size,)``, and the original ``shape``."""

    codes: torch.Tensor
    absmax: torch.Tensor
    shape: tuple[int, ...]
    block_size: int

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weights read back (``nf4_dequantize``): the original shape, in ``dtype``."""
        return nf4_dequantize(self, dtype)


def nf4_quantize(w: torch.Tensor, block_size: int = 64) -> NF4Tensor:
    """``w`` (any shape, ``numel`` a multiple of ``block_size``) -> ``NF4Tensor``: per block of ``block_size``
    consecutive values (flattened), divide by the block's largest ``|w|`` and take the nearest NF4 level."""
    check_tensor("w", w, floating=True, finite=True)
    check_int("block_size", block_size, min=2, multiple_of=2, note="two codes per byte")
    check_int("w.numel()", w.numel(), min=1, multiple_of=block_size, note=f"whole blocks of block_size={block_size}")
    blocks = w.detach().float().reshape(-1, block_size)  # (n_blocks, block)
    absmax = blocks.abs().amax(dim=1)  # (n_blocks,)
    absmax = torch.where(absmax > 0, absmax, torch.ones_like(absmax))  # a block of zeros stores zeros
    code = nf4_code_book().to(w.device)  # (16,)
    midpoints = (code[1:] + code[:-1]) / 2  # (15,): the decision boundaries between neighbouring levels
    idx = torch.bucketize(blocks / absmax[:, None], midpoints)  # (n_blocks, block) in 0..15
    packed = pack_int4((idx - 8).to(torch.int8).flatten())  # store index - 8 in [-8, 7]
    return NF4Tensor(packed, absmax, tuple(w.shape), block_size)


def nf4_dequantize(t: NF4Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``level[index] * absmax`` of each block, in the original shape and ``dtype``."""
    check_type("t", t, NF4Tensor, expected="an NF4Tensor (from nf4_quantize)")
    check_dtype("dtype", dtype, floating=True)
    idx = unpack_int4(t.codes).long() + 8  # (numel,)
    values = nf4_code_book().to(t.codes.device)[idx].view(-1, t.block_size) * t.absmax[:, None]
    return values.reshape(t.shape).to(dtype)


@torch.no_grad()
def compare_nf4_int4(w: torch.Tensor, block_size: int = 64) -> dict[str, float]:
    """Mean squared round-trip error of ``w`` under NF4 and under int4 absmax (levels -7..7) and int4 zero-point
    (0..15), each with one scale per block of ``block_size`` values: ``{"nf4", "int4_absmax", "int4_zero_point"}``."""
    t = nf4_quantize(w, block_size)  # checks w and block_size
    blocks = w.detach().float().reshape(-1, block_size)  # (n_blocks, block): one scale per row
    flat = w.detach().float().reshape(-1)
    return {
        "nf4": (t.dequantize().reshape(-1) - flat).pow(2).mean().item(),
        "int4_absmax": (fake_quantize(blocks, 4, True, "channel") - blocks).pow(2).mean().item(),
        "int4_zero_point": (fake_quantize(blocks, 4, False, "channel") - blocks).pow(2).mean().item(),
    }

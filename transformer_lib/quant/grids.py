"""Integer grids: a float ``x`` becomes ``q = round(x / scale) + zero`` and comes back as ``(q - zero) * scale``.

Used in chapter 09.

* **absmax** (symmetric): ``scale = max|x| / q_max``, no zero point; int8 uses ``[-127, 127]``, int4 ``[-7, 7]``;
* **zero-point** (asymmetric): the range ``[min(x, 0), max(x, 0)]`` is mapped onto ``[0, 2^bits - 1]``, so a
  lopsided range (e.g. after a ReLU) wastes no codes; ``zero`` is the integer that stands for 0.0.

One scale can serve the whole tensor (**per-tensor**), each output row of a weight (**per-channel**), or each run of
``group_size`` consecutive weights in a row (**group-wise**). Rounding moves each value by at most ``scale / 2``, so
a smaller scale (finer granularity) means a smaller error. Int4 codes are stored two per byte (``pack_int4``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..utils.checks import check_bool, check_choice, check_dtype, check_int, check_number, check_tensor

BITS = (4, 8)
GRANULARITIES = ("tensor", "channel", "group")


# ----------------------------------------------------------------------------- integer grids
def check_bits(bits) -> int:
    """``bits`` as an ``int``: 4 or 8 (``TypeError`` for a float or a string, ``ValueError`` for another int)."""
    return check_choice("bits", check_int("bits", bits), BITS)


def int_range(bits: int, symmetric: bool = True) -> tuple[int, int]:
    """The integer codes used: symmetric ``(-(2^(b-1) - 1), 2^(b-1) - 1)``, asymmetric ``(0, 2^b - 1)``.

    The symmetric grid drops ``-2^(b-1)`` (e.g. -128) so that ``-x`` is stored as ``-q``, as LLM.int8() does.
    """
    check_bits(bits)
    return (-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1) if symmetric else (0, 2**bits - 1)


def grouped(x: torch.Tensor, granularity: str, group_size: int | None) -> torch.Tensor:
    """View ``x: (..., K)`` as ``(rows, n_groups, group)``: each ``[r, g, :]`` shares one scale."""
    check_choice("granularity", granularity, GRANULARITIES)
    check_tensor("x", x, shape=(..., None), note="..., K")
    if granularity == "tensor":
        return x.reshape(1, 1, -1)
    K = x.shape[-1]
    if granularity == "channel":
        return x.reshape(-1, 1, K)
    check_int("group_size", group_size, min=1, note=f"dividing the last dimension K={K}")
    check_int("x.shape[-1]", K, multiple_of=group_size, note=f"whole groups of group_size={group_size}")
    return x.reshape(-1, K // group_size, group_size)


@dataclass
class QuantizedTensor:
    """Integer codes and the numbers to read them back. ``q`` has the original shape; ``scale`` (and ``zero``,
    asymmetric only) are ``(rows, n_groups)``, one per group of the grouped view (see ``grouped``)."""

    q: torch.Tensor  # int8 (symmetric) or uint8 (asymmetric) codes, shape of the original tensor
    scale: torch.Tensor  # (rows, n_groups) float
    zero: torch.Tensor | None  # (rows, n_groups) integer zero points, or None for absmax
    bits: int
    granularity: str
    group_size: int | None

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``(q - zero) * scale`` in ``dtype``, shape of the original tensor."""
        check_dtype("dtype", dtype, floating=True)
        q = grouped(self.q, self.granularity, self.group_size).to(dtype)  # (rows, n_groups, group)
        if self.zero is not None:
            q = q - self.zero.to(dtype)[..., None]
        return (q * self.scale.to(dtype)[..., None]).reshape(self.q.shape)


def quantize(
    x: torch.Tensor,
    bits: int = 8,
    symmetric: bool = True,
    granularity: str = "channel",
    group_size: int | None = None,
    scale_dtype: torch.dtype | None = None,
) -> QuantizedTensor:
    """Round ``x: (..., K)`` to ``bits``-bit integers with one scale per tensor, row (channel) or group.

    ``symmetric=True`` is absmax, ``False`` zero-point. ``scale_dtype`` (e.g. ``torch.float16``) rounds the scales
    to the precision they will be stored in (upwards) *before* rounding ``x``, so ``|x - dequantize| <= scale / 2``
    holds for the stored scales. A group of zeros gets scale 1 (any scale stores 0 exactly).
    """
    check_bits(bits)
    check_tensor("x", x, floating=True, finite=True)  # an inf sets an inf scale: its group would read back as NaN
    check_bool("symmetric", symmetric)
    if scale_dtype is not None:
        check_dtype("scale_dtype", scale_dtype, floating=True)
    qmin, qmax = int_range(bits, symmetric)
    xg = grouped(x.detach(), granularity, group_size).float()  # (rows, n_groups, group)
    if symmetric:
        scale = xg.abs().amax(dim=-1) / qmax  # (rows, n_groups)
    else:
        lo, hi = xg.amin(dim=-1).clamp(max=0), xg.amax(dim=-1).clamp(min=0)  # the range always contains 0
        scale = (hi - lo) / (qmax - qmin)
    if scale_dtype is not None:  # round up to the stored precision, so no value falls outside the grid
        largest = scale.max().item() if scale.numel() else 0.0
        check_number("x's largest scale", largest, max=torch.finfo(scale_dtype).max, note=f"what {scale_dtype} holds")
        stored = scale.to(scale_dtype)
        stored = torch.where(stored.float() < scale, torch.nextafter(stored, stored.new_tensor(float("inf"))), stored)
        scale = stored.float()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    if symmetric:
        zero = None
        q = torch.round(xg / scale[..., None]).clamp(qmin, qmax).to(torch.int8)
    else:
        zero = torch.round(qmin - lo / scale).clamp(qmin, qmax)  # the code of 0.0
        q = torch.round(xg / scale[..., None] + zero[..., None]).clamp(qmin, qmax).to(torch.uint8)
        zero = zero.to(torch.uint8)
    return QuantizedTensor(q.reshape(x.shape), scale.to(scale_dtype or x.dtype), zero, bits, granularity, group_size)


def fake_quantize(
    x: torch.Tensor, bits: int = 8, symmetric: bool = True, granularity: str = "channel", group_size: int | None = None
) -> torch.Tensor:
    """``x`` after a round trip through the integer grid (same shape and dtype): what the model will compute with."""
    return quantize(x, bits, symmetric, granularity, group_size).dequantize(x.dtype)


# ----------------------------------------------------------------------------- int4 storage
def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Two signed 4-bit codes per byte: ``q: (..., K)`` int8 in ``[-8, 7]``, K even -> ``(..., K // 2)`` uint8.

    Element ``2i`` goes into the low nibble of byte ``i``, element ``2i + 1`` into its high nibble
    (two's complement: -1 is ``0b1111``).
    """
    check_tensor("q", q, shape=(..., None), dtype=torch.int8, min=-8, note="..., K")
    check_int("q.shape[-1]", q.shape[-1], multiple_of=2, note="two codes per byte")
    if q.numel():
        check_int("q.max()", int(q.max()), max=7, note="4-bit codes in [-8, 7]")
    nib = q.to(torch.int16) & 0xF  # two's complement low 4 bits
    return (nib[..., 0::2] | (nib[..., 1::2] << 4)).to(torch.uint8)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of ``pack_int4``: ``(..., K // 2)`` uint8 -> ``(..., K)`` int8 in ``[-8, 7]``.

    Read as int8, a byte shifted right by 4 (an arithmetic shift, which copies the sign bit) is its high nibble,
    sign-extended; shifting the byte left by 4 first does the same for the low nibble.
    """
    check_tensor("packed", packed, dtype=torch.uint8)
    low = (packed << 4).view(torch.int8) >> 4  # (..., K // 2)
    high = packed.view(torch.int8) >> 4
    return torch.stack([low, high], dim=-1).flatten(-2)  # (..., K): low, high, low, high, ...

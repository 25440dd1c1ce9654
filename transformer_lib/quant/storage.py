"""What quantized weights cost to store: bits per weight, the code plus its share of a scale.

Used in chapter 09.

A ``b``-bit code per weight, and one ``scale_bits``-bit scale (float16: 16 bits) per run of weights that share it:
the whole tensor (``"tensor"``), one output row of ``K`` weights (``"channel"``) or ``group_size`` weights
(``"group"``), the granularities of ``grids.quantize``. Stored weights cost
``bits + scale_bits / weights_per_scale`` bits each: int4 in groups of 32 with float16 scales is 4.5 bits.
``state_dict_bytes`` and ``saved_size`` measure what a whole (quantized) model takes in memory and on disk.
"""

from __future__ import annotations

import math
import os
import tempfile
from functools import partial
from typing import Sequence

import torch.nn as nn

from ..data.checkpoint_io import save_weights
from ..utils.checks import check_choice, check_int, check_sequence
from .grids import GRANULARITIES


def weights_per_scale(shape: Sequence[int], granularity: str, group_size: int | None = None) -> int:
    """How many weights of a ``shape = (..., K)`` tensor share one scale at ``granularity``."""
    shape = tuple(check_sequence("shape", shape, min_len=1, note="..., K", items=partial(check_int, min=1)))
    check_choice("granularity", granularity, GRANULARITIES)
    if granularity == "tensor":
        return math.prod(shape)
    K = shape[-1]
    if granularity == "channel":
        return K
    check_int("group_size", group_size, min=1, note=f"dividing the last dimension K={K}")
    check_int("shape[-1]", K, multiple_of=group_size, note=f"whole groups of group_size={group_size}")
    return group_size


def bits_per_weight(
    bits: int, shape: Sequence[int], granularity: str = "channel", group_size: int | None = None, scale_bits: int = 16
) -> float:
    """Storage per weight in bits: the ``bits``-bit code plus its share of one ``scale_bits``-bit scale.

    ``shape``: the weight's shape ``(..., K)`` (``(out, in)`` for a linear layer); ``granularity`` and
    ``group_size`` as in ``grids.quantize``. Absmax has no zero point; for zero-point quantization add the
    zero point's bits to ``scale_bits``.
    """
    check_int("bits", bits, min=1)
    check_int("scale_bits", scale_bits, min=0)
    return bits + scale_bits / weights_per_scale(shape, granularity, group_size)


# ----------------------------------------------------------------------------- whole models
def state_dict_bytes(model: nn.Module) -> int:
    """Bytes of ``model.state_dict()`` from dtypes and shapes, a tensor shared by several names counted once."""
    seen, total = set(), 0
    for t in model.state_dict().values():
        key = (t.data_ptr(), t.dtype, tuple(t.shape))
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def saved_size(model: nn.Module) -> int:
    """Bytes of the safetensors file that ``checkpoint_io.save_weights`` writes for ``model`` (tied tensors saved
    once)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.safetensors")
        save_weights(model, path)
        return os.path.getsize(path)

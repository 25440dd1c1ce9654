"""QLoRA's base: a frozen linear layer stored in 4-bit NF4, with LoRA adapters on top in float32 (Dettmers et al.
2023, "QLoRA: Efficient Finetuning of Quantized LLMs").

Used in chapter 12.

The weight ``W: (out, in)`` is stored with chapter 09's NF4 (``nf4.nf4_quantize``: one 4-bit level index per
weight, two per byte, and one float32 absmax per block of 64 weights) and read back (``nf4.nf4_dequantize``) in
every forward pass, in the input's dtype; it never receives a gradient. Only the adapters
(``lora.LoRALinear``'s ``A`` and ``B``, float32) train.

**Double quantization** (the paper's section 3): a float32 absmax per 64 weights costs ``32 / 64 = 0.5`` bits per
weight. QLoRA quantizes those scales too: subtract their mean (one float32), then store each as an 8-bit float in
blocks of 256 scales, each block with one float32 scale of its own: ``8 / 64 + 32 / (64 * 256) = 0.127`` bits per
weight. The 8-bit float here is PyTorch's ``float8_e4m3fn`` (4 exponent bits, 3 mantissa bits, largest 448): each
block is divided by its largest ``|absmax - mean|`` over 448, so a scale comes back with a relative error of at most
``2**-4`` of its distance to the mean (``2**-10`` of the block's scale near zero); relative to the scale itself the
error is largest for a small scale in a block of 256 that also holds a large one. bitsandbytes uses its own
"dynamic" 8-bit code for this step; the layout and the byte count are the paper's.

Shapes: ``NF4Linear`` maps ``(..., in)`` to ``(..., out)`` in the input's dtype. Storage of a weight with ``n``
entries (``nf4_weight_bytes``): ``n / 2`` bytes of codes, plus ``4 n / 64`` bytes of scales, or with double
quantization ``n / 64 + 4 ceil(n / (64 * 256)) + 4``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_empty, check_int, check_tensor, check_type
from .lora import LoRAConfig, LoRALinear, check_generator, lora_targets
from ..quant.nf4 import NF4Tensor, nf4_dequantize, nf4_quantize

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # torch.finfo(float8_e4m3fn).max


def double_quantize(absmax: torch.Tensor, block_size: int = 256) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """QLoRA's double quantization of the NF4 scales ``absmax: (n_blocks,)`` float32.

    Returns ``(codes, scales, offset)``: ``codes (n_blocks,)`` uint8 (the float8 e4m3 bits of
    ``(absmax - offset) / scale``), ``scales (ceil(n_blocks / block_size),)`` float32 (each block's largest
    ``|absmax - offset|`` over 448) and ``offset`` ``(1,)`` float32 (the mean of ``absmax``).
    """
    check_tensor("absmax", absmax, shape=(None,), dtype=torch.float32, finite=True, note="n_blocks NF4 scales")
    check_int("block_size", block_size, min=1)
    n = absmax.numel()
    offset = absmax.mean().reshape(1)  # (1,)
    n_pad = -n % block_size
    centred = F.pad(absmax - offset, (0, n_pad)).view(-1, block_size)  # (n_blocks2, block_size)
    scales = centred.abs().amax(dim=1) / FP8_MAX  # (n_blocks2,)
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))  # a block equal to the mean stores zeros
    codes = (centred / scales[:, None]).to(FP8).view(torch.uint8).flatten()[:n]  # (n_blocks,)
    return codes, scales, offset


def double_dequantize(
    codes: torch.Tensor, scales: torch.Tensor, offset: torch.Tensor, block_size: int = 256
) -> torch.Tensor:
    """The scales read back: ``codes * scale of its block + offset``, ``(n_blocks,)`` float32."""
    n = codes.numel()
    values = F.pad(codes.view(FP8).float(), (0, -n % block_size)).view(-1, block_size)  # (n_blocks2, block_size)
    return (values * scales[:, None]).flatten()[:n] + offset


class NF4Linear(nn.Module):
    """A frozen ``nn.Linear`` stored in NF4 (``from_linear``); no parameters, only buffers:

    ``codes (out * in // 2,)`` uint8, and either ``absmax (out * in // block_size,)`` float32
    (``double_quant=False``) or ``absmax_codes`` uint8 of that length, ``absmax_scales`` float32 (one per
    ``scale_block_size`` scales) and ``absmax_offset (1,)`` float32; ``bias (out,)`` float32 or None.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        block_size: int = 64,
        double_quant: bool = True,
        scale_block_size: int = 256,
        device=None,
    ):
        super().__init__()
        check_int("in_features", in_features, min=1)
        check_int("out_features", out_features, min=1)
        check_int("scale_block_size", scale_block_size, min=1)
        check_int("block_size", block_size, min=2, multiple_of=2, note="two codes per byte")
        n = in_features * out_features
        check_int(
            "in_features * out_features", n, multiple_of=block_size, note=f"whole blocks of block_size={block_size}"
        )
        self.in_features, self.out_features = in_features, out_features
        self.block_size, self.double_quant, self.scale_block_size = block_size, bool(double_quant), scale_block_size
        n_blocks = n // block_size
        self.register_buffer("codes", torch.zeros(n // 2, dtype=torch.uint8, device=device))
        if self.double_quant:
            self.register_buffer("absmax_codes", torch.zeros(n_blocks, dtype=torch.uint8, device=device))
            self.register_buffer("absmax_scales", torch.ones(math.ceil(n_blocks / scale_block_size), device=device))
            self.register_buffer("absmax_offset", torch.zeros(1, device=device))
        else:
            self.register_buffer("absmax", torch.ones(n_blocks, device=device))
        self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)

    @classmethod
    @torch.no_grad()
    def from_linear(
        cls, linear: nn.Linear, block_size: int = 64, double_quant: bool = True, scale_block_size: int = 256
    ) -> "NF4Linear":
        """Quantize ``linear.weight`` with ``nf4.nf4_quantize`` (and its scales with ``double_quantize``)."""
        check_type("linear", linear, nn.Linear, expected="an nn.Linear")
        w = linear.weight
        layer = cls(
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
            block_size,
            double_quant,
            scale_block_size,
            device=w.device,
        )
        t = nf4_quantize(w, block_size)  # checks w is finite
        layer.codes.copy_(t.codes)
        if layer.double_quant:
            codes, scales, offset = double_quantize(t.absmax, scale_block_size)
            layer.absmax_codes.copy_(codes)
            layer.absmax_scales.copy_(scales)
            layer.absmax_offset.copy_(offset)
        else:
            layer.absmax.copy_(t.absmax)
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.float())
        return layer

    def scales(self) -> torch.Tensor:
        """The per-block absmax the weight is read back with: ``(n_blocks,)`` float32 (double-dequantized)."""
        if not self.double_quant:
            return self.absmax
        return double_dequantize(self.absmax_codes, self.absmax_scales, self.absmax_offset, self.scale_block_size)

    def nf4_tensor(self) -> NF4Tensor:
        """The stored weight as chapter 09's ``NF4Tensor`` (with the double-dequantized scales)."""
        return NF4Tensor(self.codes, self.scales(), (self.out_features, self.in_features), self.block_size)

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``W_hat: (out, in)`` in ``dtype``, by ``nf4.nf4_dequantize``."""
        return nf4_dequantize(self.nf4_tensor(), dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, shape=(..., self.in_features), floating=True, note=f"in_features={self.in_features}")
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.dequantized_weight(x.dtype), bias)

    def weight_bytes(self) -> int:
        """Bytes of the stored weight (codes and scales, bias excluded), counted from the buffers."""
        names = ["codes"] + (["absmax_codes", "absmax_scales", "absmax_offset"] if self.double_quant else ["absmax"])
        return sum(getattr(self, n).numel() * getattr(self, n).element_size() for n in names)

    def extra_repr(self) -> str:
        dq = f"double-quantized scales per {self.scale_block_size}" if self.double_quant else "float32 scales"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, NF4 blocks of {self.block_size}, {dq}"
        )


def nf4_weight_bytes(numel: int, block_size: int = 64, double_quant: bool = True, scale_block_size: int = 256) -> int:
    """The closed form of ``NF4Linear.weight_bytes`` for a weight of ``numel`` entries: ``numel / 2`` bytes of codes
    plus ``4 numel / block_size`` (float32 scales) or ``numel / block_size + 4 ceil(numel / (block_size *
    scale_block_size)) + 4`` (double quantization)."""
    check_int("block_size", block_size, min=2, multiple_of=2, note="two codes per byte")
    check_int("numel", numel, min=1, multiple_of=block_size, note=f"whole blocks of block_size={block_size}")
    n_blocks = numel // block_size
    scales = n_blocks + 4 * math.ceil(n_blocks / scale_block_size) + 4 if double_quant else 4 * n_blocks
    return numel // 2 + scales


def qlora_linear(
    linear: nn.Linear,
    r: int = 8,
    alpha: float = 8.0,
    dropout: float = 0.0,
    block_size: int = 64,
    double_quant: bool = True,
    generator: torch.Generator | None = None,
) -> LoRALinear:
    """``LoRALinear(NF4Linear.from_linear(linear))``: the NF4 base with float32 adapters on top."""
    return LoRALinear(NF4Linear.from_linear(linear, block_size, double_quant), r, alpha, dropout, generator)


def apply_qlora(
    model: nn.Module,
    config: LoRAConfig,
    block_size: int = 64,
    double_quant: bool = True,
    generator: torch.Generator | None = None,
) -> nn.Module:
    """Replace every ``nn.Linear`` that ``config.target_modules`` selects by ``qlora_linear`` (in place) and freeze
    everything else; returns ``model``. Checked before anything changes: the targets exist, are ``nn.Linear``, and
    each weight's size is a multiple of ``block_size``."""
    names = lora_targets(model, config)
    weights = {n: model.get_submodule(n).weight for n in names}
    check_empty(
        f"layers whose weight is not a multiple of block_size={block_size} entries",
        [n for n, w in weights.items() if w.numel() % block_size],
    )
    check_empty(
        "layers whose weight is not finite (NaN or inf)", [n for n, w in weights.items() if not w.isfinite().all()]
    )
    check_generator(generator, [model.get_submodule(n).weight.device for n in names])
    model.requires_grad_(False)
    for name in names:
        parent, _, child = name.rpartition(".")
        new = qlora_linear(
            model.get_submodule(name), config.r, config.alpha, config.dropout, block_size, double_quant, generator
        )
        setattr(model.get_submodule(parent) if parent else model, child, new)
    return model

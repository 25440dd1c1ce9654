"""Quantization: storing weights (and activations) as 8- or 4-bit integers plus a few float scales.

A float ``x`` becomes an integer ``q = round(x / scale) + zero`` and comes back as ``(q - zero) * scale``:

* **absmax** (symmetric): ``scale = max|x| / q_max``, no zero point; int8 uses ``[-127, 127]``, int4 ``[-7, 7]``;
* **zero-point** (asymmetric): the range ``[min(x, 0), max(x, 0)]`` is mapped onto ``[0, 2^bits - 1]``, so a
  lopsided range (e.g. after a ReLU) wastes no codes; ``zero`` is the integer that stands for 0.0.

One scale can serve the whole tensor (**per-tensor**), each output row of a weight (**per-channel**), or each run of
``group_size`` consecutive weights in a row (**group-wise**). Rounding moves each value by at most ``scale / 2``, so
a smaller scale (finer granularity) means a smaller error. ``QuantLinear`` stores int8 (or two int4 per byte) weights
with float16 scales and replaces ``nn.Linear`` in a model (``quantize_model``). Dettmers et al. 2022 (LLM.int8())
for outliers; Frantar et al. 2023 (GPTQ) and Lin et al. 2024 (AWQ) for group-wise int4 with float16 scales.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .modes import eval_mode

BITS = (4, 8)
GRANULARITIES = ("tensor", "channel", "group")


# ----------------------------------------------------------------------------- integer grids
def _check_bits(bits) -> None:
    if not isinstance(bits, int) or isinstance(bits, bool) or bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")


def _check_finite(x: torch.Tensor, name: str) -> None:
    """A scale set by an ``inf`` is ``inf`` and every code reads back as NaN: refuse non-finite values up front."""
    bad = ~torch.isfinite(x.detach())
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name} must hold only finite values to be quantized, got {int(bad.sum())} inf/NaN "
                         f"value(s), the first {x[first].item()} at index {first}")


def int_range(bits: int, symmetric: bool = True) -> tuple[int, int]:
    """The integer codes used: symmetric ``(-(2^(b-1) - 1), 2^(b-1) - 1)``, asymmetric ``(0, 2^b - 1)``.

    The symmetric grid drops ``-2^(b-1)`` (e.g. -128) so that ``-x`` is stored as ``-q``, as LLM.int8() does.
    """
    _check_bits(bits)
    return (-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1) if symmetric else (0, 2 ** bits - 1)


def _grouped(x: torch.Tensor, granularity: str, group_size: int | None) -> torch.Tensor:
    """View ``x: (..., K)`` as ``(rows, n_groups, group)``: each ``[r, g, :]`` shares one scale."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension, got a 0-d tensor")
    if granularity == "tensor":
        return x.reshape(1, 1, -1)
    K = x.shape[-1]
    if granularity == "channel":
        return x.reshape(-1, 1, K)
    if not isinstance(group_size, int) or group_size < 1 or K % group_size != 0:
        raise ValueError(f"group_size must be a positive int dividing the last dimension K={K}, got {group_size!r}")
    return x.reshape(-1, K // group_size, group_size)


@dataclass
class QuantizedTensor:
    """Integer codes and the numbers to read them back. ``q`` has the original shape; ``scale`` (and ``zero``,
    asymmetric only) are ``(rows, n_groups)``, one per group of the grouped view (see ``_grouped``)."""
    q: torch.Tensor  # int8 (symmetric) or uint8 (asymmetric) codes, shape of the original tensor
    scale: torch.Tensor  # (rows, n_groups) float
    zero: torch.Tensor | None  # (rows, n_groups) integer zero points, or None for absmax
    bits: int
    granularity: str
    group_size: int | None

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``(q - zero) * scale`` in ``dtype``, shape of the original tensor."""
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
        q = _grouped(self.q, self.granularity, self.group_size).to(dtype)  # (rows, n_groups, group)
        if self.zero is not None:
            q = q - self.zero.to(dtype)[..., None]
        return (q * self.scale.to(dtype)[..., None]).reshape(self.q.shape)


def quantize(x: torch.Tensor, bits: int = 8, symmetric: bool = True, granularity: str = "channel",
             group_size: int | None = None, scale_dtype: torch.dtype | None = None) -> QuantizedTensor:
    """Round ``x: (..., K)`` to ``bits``-bit integers with one scale per tensor, row (channel) or group.

    ``symmetric=True`` is absmax, ``False`` zero-point. ``scale_dtype`` (e.g. ``torch.float16``) rounds the scales
    to the precision they will be stored in (upwards) *before* rounding ``x``, so ``|x - dequantize| <= scale / 2``
    holds for the stored scales. A group of zeros gets scale 1 (any scale stores 0 exactly).
    """
    _check_bits(bits)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a floating-point tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor, got {x.dtype}")
    if not isinstance(symmetric, bool):
        raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__} {symmetric!r}")
    if scale_dtype is not None and (not isinstance(scale_dtype, torch.dtype) or not scale_dtype.is_floating_point):
        raise TypeError(f"scale_dtype must be None or a floating-point torch.dtype, got {scale_dtype!r}")
    _check_finite(x, "x")
    qmin, qmax = int_range(bits, symmetric)
    xg = _grouped(x.detach(), granularity, group_size).float()  # (rows, n_groups, group)
    if symmetric:
        scale = xg.abs().amax(dim=-1) / qmax  # (rows, n_groups)
    else:
        lo, hi = xg.amin(dim=-1).clamp(max=0), xg.amax(dim=-1).clamp(min=0)  # the range always contains 0
        scale = (hi - lo) / (qmax - qmin)
    if scale_dtype is not None:  # round up to the stored precision, so no value falls outside the grid
        stored = scale.to(scale_dtype)
        stored = torch.where(stored.float() < scale, torch.nextafter(stored, stored.new_tensor(float("inf"))), stored)
        if not torch.isfinite(stored).all():
            raise ValueError(f"a scale of up to {scale.max():.3g} does not fit in scale_dtype={scale_dtype}")
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


def fake_quantize(x: torch.Tensor, bits: int = 8, symmetric: bool = True, granularity: str = "channel",
                  group_size: int | None = None) -> torch.Tensor:
    """``x`` after a round trip through the integer grid (same shape and dtype): what the model will compute with."""
    return quantize(x, bits, symmetric, granularity, group_size).dequantize(x.dtype)


# ----------------------------------------------------------------------------- int4 storage
def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Two signed 4-bit codes per byte: ``q: (..., K)`` int8 in ``[-8, 7]``, K even -> ``(..., K // 2)`` uint8.

    Element ``2i`` goes into the low nibble of byte ``i``, element ``2i + 1`` into its high nibble
    (two's complement: -1 is ``0b1111``).
    """
    if q.dtype != torch.int8 or q.shape[-1] % 2 != 0:
        raise ValueError(f"q must be int8 with an even last dimension, got {q.dtype} {tuple(q.shape)}")
    if q.numel() and (q.min() < -8 or q.max() > 7):
        raise ValueError(f"q must hold 4-bit values in [-8, 7], got values in [{int(q.min())}, {int(q.max())}]")
    nib = q.to(torch.int16) & 0xF  # two's complement low 4 bits
    return (nib[..., 0::2] | (nib[..., 1::2] << 4)).to(torch.uint8)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of ``pack_int4``: ``(..., K // 2)`` uint8 -> ``(..., K)`` int8 in ``[-8, 7]``.

    Read as int8, a byte shifted right by 4 (an arithmetic shift, which copies the sign bit) is its high nibble,
    sign-extended; shifting the byte left by 4 first does the same for the low nibble.
    """
    if packed.dtype != torch.uint8:
        raise ValueError(f"packed must be uint8, got {packed.dtype}")
    low = (packed << 4).view(torch.int8) >> 4  # (..., K // 2)
    high = packed.view(torch.int8) >> 4
    return torch.stack([low, high], dim=-1).flatten(-2)  # (..., K): low, high, low, high, ...


# ----------------------------------------------------------------------------- activations
def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic absmax int8 for activations: one scale per token (row). ``x: (M, K)`` -> ``(q int8 (M, K),
    scale (M, 1))``; computed at run time for each input, as LLM.int8() and SmoothQuant do."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
        got = f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a floating-point tensor (M, K), got {got}")
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp_min_(1e-12).div_(127)  # (M, 1)
    return torch.round(x / scale).to(torch.int8), scale  # |x / scale| <= 127: no clamp needed


def int8_matmul(xq: torch.Tensor, wq: torch.Tensor) -> torch.Tensor:
    """``xq: (M, K) int8 @ wq: (N, K) int8 ^T -> (M, N) int32``, exact integer sums.

    ``torch._int_mm`` on CPU takes any shape; on CUDA it needs M > 16 and K, N multiples of 8, so other shapes
    (e.g. one decoding position) fall back to an exact float64 product there.
    """
    if xq.dtype != torch.int8 or wq.dtype != torch.int8 or xq.dim() != 2 or wq.dim() != 2 \
            or xq.shape[1] != wq.shape[1]:
        raise ValueError(f"xq (M, K) and wq (N, K) must be int8 matrices sharing K, got xq {xq.dtype} "
                         f"{tuple(xq.shape)} and wq {wq.dtype} {tuple(wq.shape)}")
    M, K = xq.shape
    N = wq.shape[0]
    if xq.device.type == "cpu" or (M > 16 and K % 8 == 0 and N % 8 == 0):
        return torch._int_mm(xq, wq.t())
    return (xq.double() @ wq.double().t()).to(torch.int32)  # |sum| < K * 127^2, exact in float64


def keep_outliers(x: torch.Tensor, n_outliers: int, bits: int = 8) -> torch.Tensor:
    """Per-tensor fake quantization of ``x: (M, K)`` with the ``n_outliers`` feature columns of largest magnitude
    kept in float: those columns no longer set the scale. A simplified form of LLM.int8()'s mixed-precision
    decomposition, which picks the columns by a magnitude threshold (6.0) and quantizes the rest per token."""
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor (M, K), got {x.dtype} {tuple(x.shape)}")
    if not isinstance(n_outliers, int) or isinstance(n_outliers, bool):
        raise TypeError(f"n_outliers must be an int, got {type(n_outliers).__name__} {n_outliers!r}")
    if not 0 <= n_outliers < x.shape[-1]:
        raise ValueError(f"n_outliers must be in [0, K={x.shape[-1]}), got {n_outliers}")
    cols = x.abs().amax(dim=0).topk(n_outliers).indices  # (n_outliers,)
    keep = torch.zeros(x.shape[-1], dtype=torch.bool, device=x.device)
    keep[cols] = True
    inliers = x.masked_fill(keep, 0.0)
    return torch.where(keep, x, fake_quantize(inliers, bits, granularity="tensor"))


# ----------------------------------------------------------------------------- modules
class QuantLinear(nn.Module):
    """``nn.Linear`` with int8 or int4 weights: ``y = x W_hat^T + b`` with ``W_hat = q * scale``.

    Buffers: ``qweight`` int8 ``(N, K)`` (bits=8) or uint8 ``(N, K // 2)`` (bits=4, two codes per byte);
    ``scale`` float16 ``(N, K // group_size)`` (``group_size=None``: one scale per output row); ``bias`` float.
    Weights are absmax-quantized (zero is common in weights and absmax keeps the matmul simple).

    ``act_bits=8`` (int8 per-channel only) also quantizes the input per token at run time and multiplies
    int8 by int8 into int32 (``int8_matmul``), then rescales: ``y = (x_q W_q^T) * s_x * s_w + b`` (W8A8).
    Otherwise (weight-only) the forward pass dequantizes the weight to ``x.dtype`` and calls ``F.linear``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, bits: int = 8,
                 group_size: int | None = None, act_bits: int | None = None, device=None):
        super().__init__()
        _check_bits(bits)
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if group_size is not None and (not isinstance(group_size, int) or group_size < 1
                                       or in_features % group_size != 0):
            raise ValueError(f"group_size must be None or a positive int dividing in_features={in_features}, "
                             f"got {group_size!r}")
        if act_bits not in (None, 8):
            raise ValueError(f"act_bits must be None (weight-only) or 8, got {act_bits!r}")
        if act_bits == 8 and (bits != 8 or group_size is not None):
            raise ValueError(f"act_bits=8 needs bits=8 and group_size=None (per-channel), got bits={bits}, "
                             f"group_size={group_size}")
        if bits == 4 and in_features % 2 != 0:
            raise ValueError(f"bits=4 packs two weights per byte: in_features must be even, got {in_features}")
        self.in_features, self.out_features = in_features, out_features
        self.bits, self.group_size, self.act_bits = bits, group_size, act_bits
        n_groups = 1 if group_size is None else in_features // group_size
        cols = in_features if bits == 8 else in_features // 2
        self.register_buffer("qweight", torch.zeros(out_features, cols, dtype=torch.int8 if bits == 8 else torch.uint8,
                                                    device=device))
        self.register_buffer("scale", torch.ones(out_features, n_groups, dtype=torch.float16, device=device))
        self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: nn.Linear, bits: int = 8, group_size: int | None = None,
                    act_bits: int | None = None) -> "QuantLinear":
        """Quantize a trained ``nn.Linear`` (absmax, per row or per group, float16 scales)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        w = linear.weight
        _check_finite(w, "linear.weight")
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, bits, group_size, act_bits,
                    device=w.device)
        qt = quantize(w.float(), bits, True, "channel" if group_size is None else "group", group_size,
                      scale_dtype=torch.float16)
        layer.qweight.copy_(qt.q if bits == 8 else pack_int4(qt.q))
        layer.scale.copy_(qt.scale)
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.float())
        return layer

    def int_weight(self) -> torch.Tensor:
        """The integer codes ``(N, K)`` int8 (int4 codes unpacked)."""
        return self.qweight if self.bits == 8 else unpack_int4(self.qweight)

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``W_hat = q * scale``: ``(N, K)`` in ``dtype``."""
        q = self.int_weight().to(dtype).view(self.out_features, self.scale.shape[1], -1)  # (N, n_groups, group)
        return (q * self.scale.to(dtype)[..., None]).view(self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must be (..., in_features={self.in_features}), got {tuple(x.shape)}")
        if self.act_bits is None:
            bias = None if self.bias is None else self.bias.to(x.dtype)
            return F.linear(x, self.dequantized_weight(x.dtype), bias)
        x2 = x.reshape(-1, self.in_features)  # (M, K)
        xq, sx = quantize_per_token(x2)  # (M, K) int8, (M, 1)
        acc = int8_matmul(xq, self.qweight)  # (M, N) int32, exact
        rescale = sx * self.scale.float().view(1, -1)  # (M, N): s_x[m] * s_w[n]
        y = acc * rescale if self.bias is None else torch.addcmul(self.bias.float(), acc, rescale)
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        g = "per-channel" if self.group_size is None else f"group_size={self.group_size}"
        a = "weight-only" if self.act_bits is None else f"int{self.act_bits} activations"
        return f"in_features={self.in_features}, out_features={self.out_features}, int{self.bits}, {g}, {a}"


class QuantEmbedding(nn.Module):
    """An embedding table read from a ``QuantLinear``'s buffers: GPT ties its token embedding to ``lm_head``, and
    after quantization both read the same integer matrix (stored once), each row with its own scales.

    ``idx: (B, T)`` -> ``(B, T, d)`` float32: the dequantized rows.
    """

    def __init__(self, head: QuantLinear):
        super().__init__()
        if head.act_bits is not None:
            raise ValueError("a tied embedding reads weight-only QuantLinear buffers; got act_bits="
                             f"{head.act_bits}")
        self.bits, self.n_groups = head.bits, head.scale.shape[1]
        self.num_embeddings, self.embedding_dim = head.out_features, head.in_features
        self.register_buffer("qweight", head.qweight)  # the same tensors as the head's: tied, saved once
        self.register_buffer("scale", head.scale)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        rows = self.qweight[idx]  # (B, T, K) int8 or (B, T, K // 2) packed
        q = (rows if self.bits == 8 else unpack_int4(rows)).float()  # (B, T, K)
        s = self.scale[idx].float()  # (B, T, n_groups)
        return (q.unflatten(-1, (self.n_groups, -1)) * s[..., None]).flatten(-2)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized table ``(V, d)`` float32, for code that reads ``.weight`` (e.g. for a device or dtype)."""
        return self(torch.arange(self.num_embeddings, device=self.qweight.device))


def quantize_model(model: nn.Module, bits: int = 8, group_size: int | None = None, act_bits: int | None = None,
                   skip: tuple[str, ...] = ()) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (in place; ``copy.deepcopy`` first to keep the float model) by a
    ``QuantLinear`` and return ``model``. Names in ``skip`` (e.g. ``"lm_head"``) stay float.

    Tied weights: an ``nn.Embedding`` sharing its weight with a quantized ``nn.Linear`` (GPT's ``tok_emb`` and
    ``lm_head``) becomes a ``QuantEmbedding`` over the same integer buffers, so the tie (and the single copy in
    the saved file) survives. That ``QuantLinear`` stays weight-only even with ``act_bits=8``.
    ``group_size`` must divide the ``in_features`` of every replaced layer (checked before anything changes).
    """
    _check_bits(bits)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if isinstance(skip, str) or not all(isinstance(name, str) for name in skip):
        raise TypeError(f"skip must be a tuple of module names, e.g. ('lm_head',), got {skip!r}")
    embeddings = {id(m.weight): name for name, m in model.named_modules() if isinstance(m, nn.Embedding)}
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and n not in skip]
    for name, lin in linears:
        if group_size is not None and (not isinstance(group_size, int) or group_size < 1
                                       or lin.in_features % group_size != 0):
            raise ValueError(f"group_size must divide in_features of every layer: {name} has "
                             f"in_features={lin.in_features}, got group_size={group_size!r}")
    for name, lin in linears:
        tied = embeddings.get(id(lin.weight))
        new = QuantLinear.from_linear(lin, bits, group_size, None if tied else act_bits)
        _set_module(model, name, new)
        if tied is not None:
            _set_module(model, tied, QuantEmbedding(new))
    return model


def _set_module(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


# ----------------------------------------------------------------------------- measuring
@torch.no_grad()
def lm_quality(model: nn.Module, batches, reference_top1: torch.Tensor | None = None) -> dict:
    """A language model's validation loss (nats per token), perplexity and top-1 next-token predictions on fixed
    ``batches`` of ``(x, y)``, each ``(B, T)``. ``reference_top1`` (the ``top1`` of the float model on the same
    batches) adds ``agreement``: the share of positions where both models predict the same next token."""
    device = next(model.parameters()).device
    total, count, top1 = 0.0, 0, []
    with eval_mode(model):
        for x, y in batches:
            logits, _ = model(x.to(device))  # (B, T, V)
            total += F.cross_entropy(logits.flatten(0, 1).float(), y.to(device).flatten(), ignore_index=-100,
                                     reduction="sum").item()
            count += int((y != -100).sum())
            top1.append(logits.argmax(-1).cpu())
    if count == 0:
        raise ValueError("batches must hold at least one (x, y) batch, got none")
    top1 = torch.stack(top1)  # (n_batches, B, T)
    loss = total / count
    out = {"loss": loss, "perplexity": float(torch.tensor(loss).exp()), "top1": top1, "agreement": None}
    if reference_top1 is not None:
        if reference_top1.shape != top1.shape:
            raise ValueError(f"reference_top1 must have shape {tuple(top1.shape)}, got {tuple(reference_top1.shape)}")
        out["agreement"] = (top1 == reference_top1).float().mean().item()
    return out


@torch.no_grad()
def capture_linear_inputs(model: nn.Module, run) -> dict[str, torch.Tensor]:
    """The input of every ``nn.Linear`` while ``run(model)`` executes: ``{name: (tokens, in_features)}``."""
    captured, hooks = {}, []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            def hook(module, inputs, output, name=name):
                captured.setdefault(name, []).append(inputs[0].detach().reshape(-1, inputs[0].shape[-1]).cpu())
            hooks.append(m.register_forward_hook(hook))
    try:
        run(model)
    finally:
        for h in hooks:
            h.remove()
    return {name: torch.cat(xs) for name, xs in captured.items()}

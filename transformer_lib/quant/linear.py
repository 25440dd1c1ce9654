"""``QuantLinear``: an ``nn.Linear`` stored as int8 or int4 codes with float16 scales, ``QuantEmbedding`` for a tied
embedding table, and ``quantize_model``, which swaps them into a model (round-to-nearest). GPTQ and AWQ
(``gptq.py``, ``awq.py``) choose other codes for the same storage (``QuantLinear.from_codes``).

Used in chapter 09.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_choice, check_equal, check_int, check_sequence, check_tensor, check_type
from .int8_ops import INT8_KERNELS, int8_matmul, quantize_per_token
from .grids import check_bits, int_range, pack_int4, quantize, unpack_int4


# ----------------------------------------------------------------------------- modules
class QuantLinear(nn.Module):
    """``nn.Linear`` with int8 or int4 weights: ``y = x W_hat^T + b`` with ``W_hat = q * scale``.

    Buffers: ``qweight`` int8 ``(N, K)`` (bits=8) or uint8 ``(N, K // 2)`` (bits=4, two codes per byte);
    ``scale`` float16 ``(N, K // group_size)`` (``group_size=None``: one scale per output row); ``bias`` float.
    Weights are absmax-quantized (zero is common in weights and absmax keeps the matmul simple).

    ``act_bits=8`` (int8 per-channel only) also quantizes the input per token at run time and multiplies
    int8 by int8 into int32 (``int8_matmul``), then rescales: ``y = (x_q W_q^T) * s_x * s_w + b`` (W8A8).
    Otherwise (weight-only) the forward pass dequantizes the weight to ``x.dtype`` and calls ``F.linear``.
    ``int8_kernel`` (not saved: an attribute, ``"int_mm"`` unless ``int8_kernel()`` changes it for a block) is the
    ``kernel`` of ``int8_matmul``; both give the same integers.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        bits: int = 8,
        group_size: int | None = None,
        act_bits: int | None = None,
        device=None,
    ):
        super().__init__()
        check_bits(bits)
        check_int("group_size", group_size, min=1, optional="one scale per row")
        groups = f"whole groups of group_size={group_size}" if group_size else ""
        check_int("in_features", in_features, min=1, multiple_of=group_size, note=groups)
        check_int("out_features", out_features, min=1)
        if act_bits is not None:  # None: weight-only
            check_equal("act_bits", check_int("act_bits", act_bits), 8, note="int8 activations; None: weight-only")
            check_equal("(bits, group_size)", (bits, group_size), (8, None), note="act_bits=8 needs int8 per channel")
        if bits == 4:
            check_int("in_features", in_features, multiple_of=2, note="bits=4 packs two weights per byte")
        self.in_features, self.out_features = in_features, out_features
        self.bits, self.group_size, self.act_bits = bits, group_size, act_bits
        self.int8_kernel = "int_mm"
        n_groups = 1 if group_size is None else in_features // group_size
        cols = in_features if bits == 8 else in_features // 2
        self.register_buffer(
            "qweight", torch.zeros(out_features, cols, dtype=torch.int8 if bits == 8 else torch.uint8, device=device)
        )
        self.register_buffer("scale", torch.ones(out_features, n_groups, dtype=torch.float16, device=device))
        self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)

    @classmethod
    @torch.no_grad()
    def from_linear(
        cls, linear: nn.Linear, bits: int = 8, group_size: int | None = None, act_bits: int | None = None
    ) -> "QuantLinear":
        """Quantize a trained ``nn.Linear`` (absmax, per row or per group, float16 scales)."""
        check_type("linear", linear, nn.Linear, expected="an nn.Linear")
        w = check_tensor("linear.weight", linear.weight, finite=True)
        qt = quantize(
            w.float(), bits, True, "channel" if group_size is None else "group", group_size, scale_dtype=torch.float16
        )
        return cls.from_codes(qt.q, qt.scale, linear.bias, group_size, bits, act_bits)

    @classmethod
    @torch.no_grad()
    def from_codes(
        cls,
        q: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None = None,
        group_size: int | None = None,
        bits: int = 8,
        act_bits: int | None = None,
    ) -> "QuantLinear":
        """A layer holding codes some algorithm chose (round-to-nearest, GPTQ, AWQ): ``q: (N, K)`` int8 in the
        symmetric ``bits``-bit range, ``scale: (N, K // group_size)`` (or ``(N, 1)``), stored as float16, and
        an optional ``bias: (N,)``. ``dequantized_weight()`` is then ``q * scale`` exactly."""
        check_tensor("q", q, shape=(None, None), dtype=torch.int8, note="N, K")
        N, K = q.shape
        layer = cls(K, N, bias is not None, bits, group_size, act_bits, device=q.device)
        qmin, qmax = int_range(bits)
        check_tensor("q", q, min=qmin)
        check_int("q.max()", int(q.max()), max=qmax, note=f"{bits}-bit codes in [{qmin}, {qmax}]")
        check_tensor("scale", scale, shape=tuple(layer.scale.shape), finite=True, note="N, n_groups")
        inexact = int((scale.to(torch.float16).float() != scale.float()).sum())
        note = "scale is stored in float16: quantize with scale_dtype=torch.float16"
        check_equal("count of scale values float16 cannot hold exactly", inexact, 0, note=note)
        check_tensor("bias", bias, shape=(N,), optional=True)
        layer.qweight.copy_(q if bits == 8 else pack_int4(q))
        layer.scale.copy_(scale)
        if bias is not None:
            layer.bias.copy_(bias.float())
        return layer

    def int_weight(self) -> torch.Tensor:
        """The integer codes ``(N, K)`` int8 (int4 codes unpacked)."""
        return self.qweight if self.bits == 8 else unpack_int4(self.qweight)

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``W_hat = q * scale``: ``(N, K)`` in ``dtype``."""
        q = self.int_weight().to(dtype).view(self.out_features, self.scale.shape[1], -1)  # (N, n_groups, group)
        return (q * self.scale.to(dtype)[..., None]).view(self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # an integer x failed in F.linear or was quantized silently
        check_tensor("x", x, shape=(..., self.in_features), floating=True, note="..., in_features")
        if self.act_bits is None:
            bias = None if self.bias is None else self.bias.to(x.dtype)
            return F.linear(x, self.dequantized_weight(x.dtype), bias)
        x2 = x.reshape(-1, self.in_features)  # (M, K)
        xq, sx = quantize_per_token(x2)  # (M, K) int8, (M, 1)
        acc = int8_matmul(xq, self.qweight, self.int8_kernel)  # (M, N) int32, exact
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
        check_equal("head.act_bits", head.act_bits, None, note="a tied embedding reads weight-only buffers")
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


@contextlib.contextmanager
def int8_kernel(model: nn.Module, kernel: str):
    """Within the ``with`` block, every W8A8 ``QuantLinear`` of ``model`` computes its int8 product with
    ``kernel`` (``"int_mm"`` or ``"float32"``, see ``int8_matmul``); afterwards each has its kernel back, also
    when the block raises. The outputs are the same either way: ``"float32"`` is for measuring quality fast on a
    CPU whose ``torch._int_mm`` is slow, never for timing."""
    check_choice("kernel", kernel, INT8_KERNELS)
    layers = [m for m in model.modules() if isinstance(m, QuantLinear) and m.act_bits is not None]
    before = [m.int8_kernel for m in layers]
    for m in layers:
        m.int8_kernel = kernel
    try:
        yield model
    finally:
        for m, k in zip(layers, before):
            m.int8_kernel = k


def rtn_weight(weight: torch.Tensor, bits: int, group_size: int | None) -> torch.Tensor:
    """Round-to-nearest as ``QuantLinear.from_linear`` stores it (absmax, float16 scales): ``(N, K)`` float32."""
    granularity = "channel" if group_size is None else "group"
    return quantize(weight.float(), bits, True, granularity, group_size, scale_dtype=torch.float16).dequantize()


def quantize_model(
    model: nn.Module,
    bits: int = 8,
    group_size: int | None = None,
    act_bits: int | None = None,
    skip: tuple[str, ...] = (),
) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (in place; ``copy.deepcopy`` first to keep the float model) by a
    ``QuantLinear`` and return ``model``. Names in ``skip`` (e.g. ``"lm_head"``) stay float.

    Tied weights: an ``nn.Embedding`` sharing its weight with a quantized ``nn.Linear`` (GPT's ``tok_emb`` and
    ``lm_head``) becomes a ``QuantEmbedding`` over the same integer buffers, so the tie (and the single copy in
    the saved file) survives. That ``QuantLinear`` stays weight-only even with ``act_bits=8``.
    ``group_size`` must divide the ``in_features`` of every replaced layer and every weight must be finite (both
    checked before anything changes).
    """
    check_bits(bits)
    linears = linears_to_replace(model, skip, group_size)
    embeddings = {id(m.weight): name for name, m in model.named_modules() if isinstance(m, nn.Embedding)}
    for name, lin in linears:
        tied = embeddings.get(id(lin.weight))
        new = QuantLinear.from_linear(lin, bits, group_size, None if tied else act_bits)
        set_module(model, name, new)
        if tied is not None:
            set_module(model, tied, QuantEmbedding(new))
    return model


def linears_to_replace(model: nn.Module, skip, group_size) -> list[tuple[str, nn.Linear]]:
    """``[(name, layer)]`` of the model's ``nn.Linear`` not in ``skip``; checks ``group_size`` divides each and each
    weight is finite, so that a replacement loop over them never stops half way."""
    check_type("model", model, nn.Module, expected="an nn.Module")
    check_sequence("skip", skip, note="module names, e.g. ('lm_head',)", items=str)
    check_int("group_size", group_size, min=1, optional="one scale per row")
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and n not in skip]
    note = f"group_size={group_size} must divide every layer's in_features"
    for name, lin in linears:
        check_int(f"{name or 'model'}.in_features", lin.in_features, multiple_of=group_size, note=note)
        check_tensor(f"{name or 'model'}.weight", lin.weight, finite=True)
    return linears


def set_module(model: nn.Module, name: str, new: nn.Module) -> None:
    """Put ``new`` where the submodule called ``name`` (e.g. ``"blocks.0.ff.up"``) was."""
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)

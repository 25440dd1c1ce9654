"""Quantization: storing weights (and activations) as 8- or 4-bit integers plus a few float scales.

This package's face gathers every public name of its modules (``from transformer_lib import quant as Q``, then
``Q.quantize``, ``Q.gptq_quantize``); each concept lives in its own module, where its documentation is:

* ``grids``: integer grids (absmax, zero-point; per tensor, channel or group), ``quantize``, ``fake_quantize``,
  int4 packing (``pack_int4`` / ``unpack_int4``);
* ``int8_ops``: int8 activations per token and the exact int8 x int8 -> int32 product, by ``torch._int_mm`` or
  exactly in float32 chunks (W8A8, LLM.int8() outliers);
* ``linear``: ``QuantLinear`` / ``QuantEmbedding`` and ``quantize_model`` (round-to-nearest);
* ``storage``: what quantized weights cost, in bits per weight (``bits_per_weight``), in memory
  (``state_dict_bytes``) and on disk (``saved_size``);
* ``calibration``: a model's quality on fixed batches and the inputs its linear layers see;
* ``channel_scale``: per-input-channel scaling that leaves a layer's output unchanged (``ScaledInput``), which AWQ
  and SmoothQuant share;
* ``gptq`` (Frantar et al. 2022), ``awq`` (Lin et al. 2023), ``smoothquant`` (Xiao et al. 2023): algorithms that
  choose better codes (or move outliers) using calibration inputs, stored in the same ``QuantLinear``;
* ``nf4``: the 4-bit NormalFloat code book of QLoRA (Dettmers et al. 2023), block-wise.

The modules' argument checks (``check_bits``, ``check_channel_scale``) are not gathered here: they
guard the functions above rather than being tools of their own (``tests/test_structure.py`` checks that every other
public name is).
"""

from __future__ import annotations

from .awq import AWQScales, awq_linear, awq_quantize_model, awq_scales
from .calibration import calibration_inputs, capture_linear_inputs, lm_quality, replace_linears_calibrated
from .channel_scale import ScaledInput, scale_columns
from .gptq import gptq_linear, gptq_quantize, gptq_quantize_model, layer_hessian
from .grids import (
    BITS,
    GRANULARITIES,
    QuantizedTensor,
    fake_quantize,
    grouped,
    int_range,
    pack_int4,
    quantize,
    unpack_int4,
)
from .int8_ops import (
    FLOAT32_EXACT_K,
    INT8_KERNELS,
    float32_int8_matmul,
    int8_matmul,
    keep_outliers,
    padded_int_mm,
    quantize_per_token,
)
from .linear import (
    QuantEmbedding,
    QuantLinear,
    int8_kernel,
    linears_to_replace,
    quantize_model,
    rtn_weight,
    set_module,
)
from .nf4 import NF4_OFFSET, NF4Tensor, compare_nf4_int4, nf4_code_book, nf4_dequantize, nf4_quantize
from .smoothquant import smooth_linear, smoothing_factors, smoothquant_model
from .storage import bits_per_weight, saved_size, state_dict_bytes, weights_per_scale

__all__ = [
    "AWQScales",
    "BITS",
    "FLOAT32_EXACT_K",
    "GRANULARITIES",
    "INT8_KERNELS",
    "NF4_OFFSET",
    "NF4Tensor",
    "QuantEmbedding",
    "QuantLinear",
    "QuantizedTensor",
    "ScaledInput",
    "awq_linear",
    "awq_quantize_model",
    "awq_scales",
    "bits_per_weight",
    "calibration_inputs",
    "capture_linear_inputs",
    "compare_nf4_int4",
    "fake_quantize",
    "float32_int8_matmul",
    "gptq_linear",
    "gptq_quantize",
    "gptq_quantize_model",
    "grouped",
    "int8_kernel",
    "int8_matmul",
    "int_range",
    "keep_outliers",
    "layer_hessian",
    "linears_to_replace",
    "lm_quality",
    "nf4_code_book",
    "nf4_dequantize",
    "nf4_quantize",
    "pack_int4",
    "padded_int_mm",
    "quantize",
    "quantize_model",
    "quantize_per_token",
    "replace_linears_calibrated",
    "rtn_weight",
    "saved_size",
    "scale_columns",
    "set_module",
    "smooth_linear",
    "smoothing_factors",
    "smoothquant_model",
    "state_dict_bytes",
    "unpack_int4",
    "weights_per_scale",
]

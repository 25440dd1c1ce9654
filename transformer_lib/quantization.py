"""Quantization: storing weights (and activations) as 8- or 4-bit integers plus a few float scales.

Used in chapter 09.

This module gathers the package's quantization tools under one name (``from transformer_lib import quantization
as Q``); each concept lives in its own module:

* ``quant_grids``: integer grids (absmax, zero-point; per tensor, channel or group), ``quantize``, int4 packing;
* ``int8_ops``: int8 activations per token and the exact int8 x int8 -> int32 product (W8A8, LLM.int8() outliers);
* ``quant_linear``: ``QuantLinear`` / ``QuantEmbedding`` and ``quantize_model`` (round-to-nearest);
* ``calibration``: a model's quality on fixed batches and the inputs its linear layers see;
* ``gptq`` (Frantar et al. 2022), ``awq`` (Lin et al. 2023), ``smoothquant`` (Xiao et al. 2023): algorithms that
  choose better codes (or move outliers) using calibration inputs, stored in the same ``QuantLinear``;
* ``nf4``: the 4-bit NormalFloat code book of QLoRA (Dettmers et al. 2023), block-wise.
"""
from __future__ import annotations

from .awq import AWQScales, awq_linear, awq_quantize_model, awq_scales
from .calibration import calibration_inputs, capture_linear_inputs, lm_quality
from .channel_scale import ScaledInput, scale_columns
from .gptq import gptq_linear, gptq_quantize, gptq_quantize_model, layer_hessian
from .int8_ops import int8_matmul, keep_outliers, padded_int_mm, quantize_per_token
from .nf4 import NF4Tensor, compare_nf4_int4, nf4_code_book, nf4_dequantize, nf4_quantize
from .quant_grids import (BITS, GRANULARITIES, QuantizedTensor, fake_quantize, int_range, pack_int4, quantize,
                          unpack_int4)
from .quant_linear import QuantEmbedding, QuantLinear, quantize_model, rtn_weight
from .smoothquant import smooth_linear, smoothing_factors, smoothquant_model

__all__ = ["AWQScales", "BITS", "GRANULARITIES", "NF4Tensor", "QuantEmbedding", "QuantLinear", "QuantizedTensor",
           "ScaledInput", "awq_linear", "awq_quantize_model", "awq_scales", "calibration_inputs",
           "capture_linear_inputs", "compare_nf4_int4", "fake_quantize", "gptq_linear", "gptq_quantize",
           "gptq_quantize_model", "int8_matmul", "int_range", "keep_outliers", "layer_hessian", "lm_quality",
           "nf4_code_book", "nf4_dequantize", "nf4_quantize", "pack_int4", "padded_int_mm", "quantize",
           "quantize_model", "quantize_per_token", "rtn_weight", "scale_columns", "smooth_linear",
           "smoothing_factors", "smoothquant_model", "unpack_int4"]

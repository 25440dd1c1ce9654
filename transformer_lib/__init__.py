"""transformer_lib: the tested implementations behind the interactive Transformer book."""

from .attention import attention_weights, scaled_dot_product_attention, softmax_with_temperature
from .device import default_device, seed_everything
from .layers import DecoderLayer, EncoderLayer, FeedForward, LayerNorm, Residual, layer_norm
from .masking import causal_mask, combine_masks, padding_mask, padding_mask_from_ids, to_additive, to_boolean
from .models import GPT, BertConfig, BertEncoder, GPTConfig, Transformer, TransformerConfig
from .multihead import MultiHeadAttention
from .positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    sinusoidal_table,
)

__version__ = "0.1.0"

"""transformer_lib: the tested implementations behind the interactive Transformer book."""

from .blocks.attention import attention_weights, scaled_dot_product_attention, softmax_with_temperature
from .utils.device import default_device, seed_everything
from .blocks.layers import DecoderLayer, EncoderLayer, FeedForward, LayerNorm, Residual, layer_norm
from .blocks.masking import causal_mask, combine_masks, padding_mask, padding_mask_from_ids, to_additive, to_boolean
from .models.configs import BertConfig, GPTConfig, TransformerConfig
from .models.transformer import GPT, BertEncoder, Transformer
from .blocks.multihead import MultiHeadAttention
from .blocks.cached_attention import CachedSelfAttention
from .blocks.grouped_query import GroupedQueryAttention
from .blocks.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    sinusoidal_table,
)

__version__ = "0.1.0"

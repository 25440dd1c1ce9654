"""The pieces of a Transformer block: FFN, LayerNorm, residual sub-layers, encoder and decoder layers.

Used in chapters 05 and 11.

Vaswani et al. 2017, section 3.1 (post-norm: ``LayerNorm(x + Sublayer(x))``); pre-norm
(``x + Sublayer(LayerNorm(x))``, Xiong et al. 2020, used by GPT-2) is a flag.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_bool, check_choice, check_int, check_number, check_tensor
from .multihead import MultiHeadAttention

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


class FeedForward(nn.Module):
    """Position-wise FFN (section 3.3): ``act(x W_1 + b_1) W_2 + b_2``, ``(B, T, d_model) -> (B, T, d_model)``."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        check_choice("activation", activation, ACTIVATIONS)
        self.up = nn.Linear(d_model, d_ff, bias=bias)  # W_1: (d_ff, d_model)
        self.down = nn.Linear(d_ff, d_model, bias=bias)  # W_2: (d_model, d_ff)
        self.act = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.dropout(self.act(self.up(x))))


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Layer normalization written out (Ba et al. 2016): normalize each position over its features.

    ``y = (x - mean) / sqrt(var + eps) * gamma + beta``, mean and (biased) var over the last dim of
    ``x: (..., d_model)``; ``weight`` (gamma) and ``bias`` (beta): ``(d_model,)``. Statistics in fp32.
    """
    check_tensor("x", x, floating=True, finite=True)  # an integer x would come back truncated
    check_tensor("weight", weight, shape=(x.shape[-1],))
    check_tensor("bias", bias, shape=(x.shape[-1],))
    xf = x.float()  # statistics in fp32 even for bf16/fp16 inputs
    mean = xf.mean(dim=-1, keepdim=True)  # (..., 1)
    centered = xf - mean
    var = (centered * centered).mean(dim=-1, keepdim=True)  # (..., 1), biased
    y = centered * torch.rsqrt(var + eps)
    return (y * weight.float() + bias.float()).to(x.dtype)


class LayerNorm(nn.Module):
    """LayerNorm over the last dim, ``(..., d_model) -> (..., d_model)``, in fp32 for any input dtype.

    It computes ``layer_norm`` above, through PyTorch's fused ``F.layer_norm`` kernel: the written-out version
    launches about ten operations forward and more backward (with the fused kernel the book's GPT takes about 7%
    more steps in the same time, ``scripts/gpt_budget.py``). The tests check that both equal ``nn.LayerNorm``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        check_int("d_model", d_model, min=1)
        check_number("eps", eps, 0, 1, min_open=True, max_open=True, note="a small positive number")
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma
        self.bias = nn.Parameter(torch.zeros(d_model))  # beta
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # shape and dtype only (an integer x came back truncated), no NaN check per layer
        check_tensor("x", x, shape=(..., self.weight.shape[0]), floating=True, note="..., d_model")
        if x.dtype == self.weight.dtype == torch.float32:  # already fp32: no conversions (one kernel per call)
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        y = F.layer_norm(x.float(), self.weight.shape, self.weight.float(), self.bias.float(), self.eps)
        return y.to(x.dtype)


class Residual(nn.Module):
    """A residual connection around one sub-layer, with its LayerNorm and dropout.

    post-norm (the paper): ``LayerNorm(x + Dropout(f(x)))``;
    pre-norm (GPT-2):     ``x + Dropout(f(LayerNorm(x)))``.
    """

    def __init__(self, d_model: int, norm_first: bool = False, dropout: float = 0.0, eps: float = 1e-5):
        super().__init__()
        self.norm = LayerNorm(d_model, eps)
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each in a ``Residual``. ``x: (B, T, d_model) -> (B, T, d_model)``."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        bias: bool = True,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, bias)
        self.ffn = FeedForward(d_model, d_ff, activation, dropout, bias)
        self.res_self = Residual(d_model, norm_first, dropout, eps)
        self.res_ffn = Residual(d_model, norm_first, dropout, eps)
        self.self_weights = None  # (B, H, T, T) after a forward with need_weights=True
        self.register_load_state_dict_pre_hook(_rename_old_keys)

    def forward(self, x, attention_mask=None, self_mask=None, need_weights: bool = False):
        """``attention_mask: (B, T)`` bool, True on real tokens; ``self_mask``: the self-attention's ``attn_mask``."""

        def attend(h):
            out, self.self_weights = self.self_attn(
                h, attn_mask=self_mask, attention_mask=attention_mask, need_weights=need_weights
            )
            return out

        x = self.res_self(x, attend)
        return self.res_ffn(x, self.ffn)


# the encoder layer's self-attention residual was called ``res_attn`` before it took the decoder's ``res_self``
_OLD_KEYS = {"res_attn.": "res_self."}


def _rename_old_keys(module, state_dict, prefix, *args) -> None:
    """Load state dicts saved before a sub-module was renamed (``_OLD_KEYS``): their keys move to the new names."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        for old, new in _OLD_KEYS.items():
            if key[len(prefix) :].startswith(old):
                state_dict[prefix + new + key[len(prefix) + len(old) :]] = state_dict.pop(key)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder's memory, FFN; each in a ``Residual``.

    With ``cross_attention=False`` this is a GPT block (masked self-attention and FFN only).
    ``x: (B, Tq, d_model)``, ``memory: (B, Tk, d_model)``.

    ``causal`` (an attribute, default True): the self-attention's causal mask. ``forward`` reads it unless its
    ``is_causal`` argument says otherwise; ``variants.set_causal`` flips it on a whole model.
    ``self_attn``: a self-attention module to use instead of ``MultiHeadAttention`` (a cached one, chapter 07).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        bias: bool = True,
        cross_attention: bool = True,
        causal: bool = True,
        self_attn: nn.Module | None = None,
    ):
        super().__init__()
        self.causal = check_bool("causal", causal)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, bias) if self_attn is None else self_attn
        self.res_self = Residual(d_model, norm_first, dropout, eps)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout, bias) if cross_attention else None
        self.res_cross = Residual(d_model, norm_first, dropout, eps) if cross_attention else None
        self.ffn = FeedForward(d_model, d_ff, activation, dropout, bias)
        self.res_ffn = Residual(d_model, norm_first, dropout, eps)
        self.self_weights = self.cross_weights = None  # filled when need_weights=True

    def forward(
        self,
        x,
        memory=None,
        self_mask=None,
        encoder_attention_mask=None,
        attention_mask=None,
        is_causal: bool | None = None,
        need_weights: bool = False,
        **self_attn_args,
    ):
        """``is_causal``: None (default) = the layer's ``causal`` attribute; True/False overrides it for this call.
        ``self_attn_args`` go to ``self_attn`` as they are (a KV ``cache``, chapter 07)."""
        if self.cross_attn is not None:  # before self_attn writes to a cache in self_attn_args
            check_tensor("memory", memory, note="B, Tk, d_model: a DecoderLayer with cross-attention needs it")
        is_causal = self.causal if is_causal is None else is_causal

        def self_attend(h):
            out, self.self_weights = self.self_attn(
                h,
                attn_mask=self_mask,
                attention_mask=attention_mask,
                is_causal=is_causal,
                need_weights=need_weights,
                **self_attn_args,
            )
            return out

        def cross_attend(h):
            out, self.cross_weights = self.cross_attn(
                h, memory, attention_mask=encoder_attention_mask, need_weights=need_weights
            )
            return out

        x = self.res_self(x, self_attend)
        if self.cross_attn is not None:
            x = self.res_cross(x, cross_attend)
        return self.res_ffn(x, self.ffn)


@torch.no_grad()
def _copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight.copy_(src.weight)
    if dst.bias is not None:
        dst.bias.copy_(src.bias)


@torch.no_grad()
def load_encoder_layer_from_torch(layer: EncoderLayer, ref: nn.TransformerEncoderLayer) -> EncoderLayer:
    """Copy an ``nn.TransformerEncoderLayer``'s weights into ``layer`` (same sizes)."""
    layer.self_attn.load_from_torch(ref.self_attn)
    _copy_linear(layer.ffn.up, ref.linear1)
    _copy_linear(layer.ffn.down, ref.linear2)
    for ours, theirs in ((layer.res_self.norm, ref.norm1), (layer.res_ffn.norm, ref.norm2)):
        ours.load_state_dict(theirs.state_dict())
    return layer


@torch.no_grad()
def load_decoder_layer_from_torch(layer: DecoderLayer, ref: nn.TransformerDecoderLayer) -> DecoderLayer:
    """Copy an ``nn.TransformerDecoderLayer``'s weights into ``layer`` (same sizes)."""
    layer.self_attn.load_from_torch(ref.self_attn)
    layer.cross_attn.load_from_torch(ref.multihead_attn)
    _copy_linear(layer.ffn.up, ref.linear1)
    _copy_linear(layer.ffn.down, ref.linear2)
    norms = ((layer.res_self.norm, ref.norm1), (layer.res_cross.norm, ref.norm2), (layer.res_ffn.norm, ref.norm3))
    for ours, theirs in norms:
        ours.load_state_dict(theirs.state_dict())
    return layer

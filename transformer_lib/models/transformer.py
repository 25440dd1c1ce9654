"""Three Transformer families built from the same layers (their configs: ``transformer_lib.models.configs``).

Used in chapters 04, 05 and 07.

* ``Transformer``: the encoder-decoder of Vaswani et al. 2017 (translation), post-norm by default.
* ``GPT``: decoder-only (Radford et al. 2018/2019), pre-norm blocks without cross-attention.
* ``BertEncoder``: encoder-only (Devlin et al. 2019), parameter layout able to load a BERT checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_ids, check_number, check_tensor
from ..blocks.cached_attention import CachedSelfAttention
from ..blocks.grouped_query import GroupedQueryAttention
from ..blocks.layers import DecoderLayer, EncoderLayer, LayerNorm
from .configs import BertConfig, GPTConfig, TransformerConfig
from ..utils.params import count_parameters
from ..blocks.positional import LearnedPositionalEmbedding, RotaryEmbedding, SinusoidalPositionalEncoding, alibi_bias


# ----------------------------------------------------------------------------- checks
def _check_mask_arg(mask: torch.Tensor, shape: tuple, name: str) -> None:
    """A key-padding mask: bool ``shape`` (B, T), True on real tokens."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != tuple(shape):
        got = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a bool tensor {tuple(shape)} (True on real tokens), got {got}")


def _check_ids(ids: torch.Tensor, vocab_size: int, name: str) -> None:
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be an integer tensor (B, T), got {type(ids).__name__}")
    if ids.dim() != 2 or ids.dtype not in (torch.long, torch.int, torch.int32):
        raise ValueError(f"{name} must be an integer tensor (B, T), got {ids.dtype} {tuple(ids.shape)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"{name} ids must be in [0, {vocab_size}), got range [{int(ids.min())}, {int(ids.max())}]")


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """GPT-2/BERT initialisation: N(0, 0.02) for Linear and Embedding weights, zero biases."""
    check_number("std", std, min=0, min_open=True)
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


# ----------------------------------------------------------------------------- encoder-decoder
class Transformer(nn.Module):
    """Encoder-decoder Transformer. ``src: (B, S)`` ids, ``tgt: (B, T)`` ids -> logits ``(B, T, tgt_vocab)``."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        c = cfg
        self.src_emb = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_emb = nn.Embedding(c.tgt_vocab_size, c.d_model)
        self.pos = SinusoidalPositionalEncoding(c.d_model, c.max_len)
        self.dropout = nn.Dropout(c.dropout)
        layer_args = dict(dropout=c.dropout, activation=c.activation, norm_first=c.norm_first)
        attn = (c.d_model, c.n_heads, c.dropout)
        self.encoder = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, **layer_args) for _ in range(c.n_encoder_layers)
        )
        self.decoder = nn.ModuleList(  # self-attention that reads a KV cache when decoding (serving.seq2seq)
            DecoderLayer(c.d_model, c.n_heads, c.d_ff, **layer_args, self_attn=CachedSelfAttention(*attn, layer_idx=i))
            for i in range(c.n_decoder_layers)
        )
        # pre-norm stacks end with a LayerNorm (their residual stream is never normalized otherwise)
        self.enc_norm = LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.dec_norm = LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        self.apply(init_weights)
        if c.share_embeddings:  # one matrix: both embeddings and the pre-softmax weight (paper, section 3.4)
            self.tgt_emb.weight = self.generator.weight = self.src_emb.weight

    def embed(self, emb: nn.Embedding, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.dropout(self.pos(emb(ids) * math.sqrt(self.cfg.d_model), offset))  # (B, T, d_model)

    def encode(self, src: torch.Tensor, attention_mask: torch.Tensor | None = None, need_weights: bool = False):
        """``src: (B, S)`` -> memory ``(B, S, d_model)``. ``attention_mask: (B, S)`` bool, True on real tokens
        (default: ``src != pad_id``)."""
        _check_ids(src, self.cfg.src_vocab_size, "src")
        attention_mask = src != self.cfg.pad_id if attention_mask is None else attention_mask
        _check_mask_arg(attention_mask, src.shape, "attention_mask")
        x = self.embed(self.src_emb, src)
        for layer in self.encoder:
            x = layer(x, attention_mask=attention_mask, need_weights=need_weights)
        return self.enc_norm(x)

    def decode(
        self, tgt, memory, attention_mask=None, decoder_attention_mask=None, need_weights: bool = False, cache=None
    ):
        """``tgt: (B, T)`` ids, ``memory: (B, S, d_model)`` -> logits ``(B, T, tgt_vocab)``.

        ``attention_mask: (B, S)`` hides padded source positions; ``decoder_attention_mask: (B, past + T)`` padded
        target keys (``past`` = tokens already in ``cache``, else 0). Both bool, True on real tokens (the names of
        Hugging Face's encoder-decoder models).
        """
        _check_ids(tgt, self.cfg.tgt_vocab_size, "tgt")
        B, d = tgt.shape[0], self.cfg.d_model
        if not isinstance(memory, torch.Tensor) or memory.dim() != 3 or memory.shape[0] != B or memory.shape[2] != d:
            got = tuple(memory.shape) if isinstance(memory, torch.Tensor) else type(memory).__name__
            raise ValueError(f"memory must be (B={B}, S, d_model={d}) from encode(), got {got}")
        if attention_mask is not None:
            _check_mask_arg(attention_mask, memory.shape[:2], "attention_mask")
        past = 0 if cache is None else cache.get_seq_length(0)
        if decoder_attention_mask is not None:
            _check_mask_arg(decoder_attention_mask, (B, past + tgt.shape[1]), "decoder_attention_mask")
        x = self.embed(self.tgt_emb, tgt, offset=past)
        for layer in self.decoder:
            x = layer(
                x,
                memory,
                encoder_attention_mask=attention_mask,
                attention_mask=decoder_attention_mask,
                need_weights=need_weights,
                cache=cache,
            )
        return self.generator(self.dec_norm(x))

    def forward(
        self, src: torch.Tensor, tgt: torch.Tensor, attention_mask=None, decoder_attention_mask=None
    ) -> torch.Tensor:
        attention_mask = src != self.cfg.pad_id if attention_mask is None else attention_mask
        return self.decode(tgt, self.encode(src, attention_mask), attention_mask, decoder_attention_mask)


# ----------------------------------------------------------------------------- decoder-only
def gpt_self_attention(c: GPTConfig, rope: nn.Module | None, layer_idx: int) -> CachedSelfAttention:
    """Block ``layer_idx``'s self-attention: cached, with ``rope`` and ``c.window``; grouped when ``c.n_kv_heads``
    is below ``c.n_heads``."""
    args = dict(dropout=c.dropout, bias=c.bias, rope=rope, layer_idx=layer_idx, window=c.window)
    if c.n_kv_heads in (None, c.n_heads):
        return CachedSelfAttention(c.d_model, c.n_heads, **args)
    return GroupedQueryAttention(c.d_model, c.n_heads, c.n_kv_heads, **args)


class GPT(nn.Module):
    """Decoder-only language model (GPT-2's shape): ``idx: (B, T)`` token ids, and ``targets: (B, T)`` when training,
    -> ``(logits (B, T, vocab_size), loss or None)``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = c = cfg
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos = {
            "learned": lambda: LearnedPositionalEmbedding(c.d_model, c.block_size),
            "sinusoidal": lambda: SinusoidalPositionalEncoding(c.d_model, c.block_size),
        }.get(c.positional, lambda: None)()
        rope = RotaryEmbedding(c.d_head) if c.positional == "rope" else None
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            DecoderLayer(
                c.d_model,
                c.n_heads,
                c.d_ff,
                c.dropout,
                "gelu",
                norm_first=True,
                bias=c.bias,
                cross_attention=False,
                self_attn=gpt_self_attention(c, rope, layer_idx=i),
            )
            for i in range(c.n_layers)
        )
        self.norm = LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.apply(init_weights)
        self.lm_head.weight = self.tok_emb.weight  # weight tying (Press & Wolf 2017)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        cache=None,
        attention_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        position_ids: torch.Tensor | None = None,
    ):
        """Returns ``(logits (B, T, V), loss or None)``. ``targets: (B, T)``, -100 = ignore.

        ``cache``: a KV cache (chapter 07); ``attention_mask: (B, past + T)`` bool, True on real tokens.
        ``position_ids: (B, T)``: each token's position for the learned/sinusoidal tables (default
        ``past .. past + T - 1``), so a left-padded row can start at 0 as it would alone. RoPE and ALiBi
        depend only on the distance between two tokens, which padding does not change: they ignore it.
        """
        _check_ids(idx, self.cfg.vocab_size, "idx")
        B, T = idx.shape
        check_ids("targets", targets, self.cfg.vocab_size, shape=(B, T), ignore_index=-100, optional=True)
        past = 0 if cache is None else cache.get_seq_length(0)
        check_tensor("attention_mask", attention_mask, (B, past + T), dtype=torch.bool, optional=True)
        if past + T > self.cfg.block_size and self.cfg.positional in ("learned", "sinusoidal"):
            raise ValueError(
                f"sequence length {past + T} (past={past} + T={T}) exceeds block_size={self.cfg.block_size}"
            )
        check_ids("position_ids", position_ids, self.cfg.block_size, shape=(B, T), optional=True)
        x = self.tok_emb(idx)  # (B, T, d_model)
        if self.pos is not None and position_ids is None:
            x = self.pos(x, offset=past)
        elif self.pos is not None:
            x = x + self.position_table()[position_ids].to(x.dtype)  # (B, T, d_model)
        x = self.drop(x)
        bias = None
        if self.cfg.positional == "alibi":
            bias = alibi_bias(self.cfg.n_heads, T, past + T, device=idx.device, dtype=x.dtype)  # (H, T, past + T)
            bias = bias[None]  # (1, H, T, past + T): one bias per head, shared by the batch
        for block in self.blocks:
            x = block(x, self_mask=bias, attention_mask=attention_mask, need_weights=need_weights, cache=cache)
        logits = self.lm_head(self.norm(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten().long(), ignore_index=-100)
        return logits, loss

    def position_table(self) -> torch.Tensor | None:
        """The ``(block_size, d_model)`` vectors added to the embeddings (learned or sinusoidal), else None."""
        if isinstance(self.pos, LearnedPositionalEmbedding):
            return self.pos.weight
        return None if self.pos is None else self.pos.pe

    def num_params(self) -> int:
        """The model's parameters, the tied head once (``count_parameters``)."""
        return count_parameters(self)


# ----------------------------------------------------------------------------- encoder-only
@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, d_model)
    hidden_states: tuple = field(default_factory=tuple)  # n_layers + 1 of (B, T, d_model)
    attentions: tuple = field(default_factory=tuple)  # n_layers of (B, H, T, T), if requested


class BertEmbeddings(nn.Module):
    """Token + learned position + segment embeddings, then LayerNorm (BERT section 3)."""

    def __init__(self, c: BertConfig):
        super().__init__()
        self.word = nn.Embedding(c.vocab_size, c.d_model)
        self.position = nn.Embedding(c.max_len, c.d_model)
        self.token_type = nn.Embedding(c.type_vocab_size, c.d_model)
        self.norm = LayerNorm(c.d_model, c.eps)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        T = ids.shape[1]
        if T > self.position.num_embeddings:
            raise ValueError(f"sequence length T={T} exceeds max_len={self.position.num_embeddings}")
        pos = torch.arange(T, device=ids.device)
        return self.dropout(self.norm(self.word(ids) + self.position(pos) + self.token_type(token_type_ids)))


class BertEncoder(nn.Module):
    """Encoder-only Transformer: embeddings then post-norm GELU ``EncoderLayer``s."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = c = cfg
        self.embeddings = BertEmbeddings(c)
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, "gelu", norm_first=False, eps=c.eps)
            for _ in range(c.n_layers)
        )
        self.apply(init_weights)

    def num_params(self) -> int:
        """The encoder's parameters (``count_parameters``), as ``GPT.num_params``."""
        return count_parameters(self)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, need_weights: bool = False) -> BertOutput:
        """``input_ids: (B, T)``; ``attention_mask: (B, T)`` 1/True on real tokens (HF convention);
        ``token_type_ids: (B, T)`` segment ids (default all 0). ``attentions`` are filled when ``need_weights``.

        Padding only masks *keys*: padded query rows are still computed (from the real keys) and
        should be ignored downstream, as ``pretrained.mean_pool`` does.
        """
        _check_ids(input_ids, self.cfg.vocab_size, "input_ids")
        for name, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if t is not None and not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a tensor (B, T) or None, got {type(t).__name__}")
        if attention_mask is not None:
            if attention_mask.shape != input_ids.shape:
                raise ValueError(
                    f"attention_mask must have input_ids' shape {tuple(input_ids.shape)}, "
                    f"got {tuple(attention_mask.shape)}"
                )
            attention_mask = attention_mask.bool()
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # one segment
        elif token_type_ids.shape != input_ids.shape:
            raise ValueError(
                f"token_type_ids must have input_ids' shape {tuple(input_ids.shape)}, got {tuple(token_type_ids.shape)}"
            )
        else:
            _check_ids(token_type_ids, self.cfg.type_vocab_size, "token_type_ids")
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, d_model)
        hidden, attentions = [x], []
        for layer in self.layers:
            x = layer(x, attention_mask=attention_mask, need_weights=need_weights)
            hidden.append(x)
            if need_weights:
                attentions.append(layer.self_weights)
        return BertOutput(x, tuple(hidden), tuple(attentions))

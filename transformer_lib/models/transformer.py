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

from ..utils.checks import check_ids, check_int, check_number, check_tensor
from ..blocks.cached_attention import CachedSelfAttention
from ..blocks.grouped_query import GroupedQueryAttention
from ..blocks.layers import DecoderLayer, EncoderLayer, LayerNorm
from .configs import BertConfig, GPTConfig, TransformerConfig
from ..utils.params import count_parameters
from ..blocks.positional import LearnedPositionalEmbedding, RotaryEmbedding, SinusoidalPositionalEncoding, alibi_bias


ID_DTYPES = (torch.long, torch.int32)  # the token ids nn.Embedding reads (not int8, int16 or uint8)
REAL_TOKENS = "True on real tokens"  # what a key-padding mask holds


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
        check_ids("src", src, self.cfg.src_vocab_size, shape=("B", "S"), dtype=ID_DTYPES)
        attention_mask = src != self.cfg.pad_id if attention_mask is None else attention_mask
        check_tensor("attention_mask", attention_mask, shape=tuple(src.shape), dtype=torch.bool, note=REAL_TOKENS)
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
        check_ids("tgt", tgt, self.cfg.tgt_vocab_size, shape=("B", "T"), dtype=ID_DTYPES)
        (B, T), d = tgt.shape, self.cfg.d_model
        check_tensor("memory", memory, shape=(B, None, d), note=f"encode()'s (B={B}, S, d_model={d})")
        check_tensor(
            "attention_mask", attention_mask, (B, memory.shape[1]), dtype=torch.bool, note=REAL_TOKENS, optional=True
        )
        past = 0 if cache is None else cache.get_seq_length(0)
        mask = decoder_attention_mask
        check_tensor("decoder_attention_mask", mask, (B, past + T), dtype=torch.bool, note=REAL_TOKENS, optional=True)
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
        check_ids("idx", idx, self.cfg.vocab_size, shape=("B", "T"), dtype=ID_DTYPES)
        B, T = idx.shape
        check_ids("targets", targets, self.cfg.vocab_size, shape=(B, T), ignore_index=-100, optional=True)
        past = 0 if cache is None else cache.get_seq_length(0)
        check_tensor("attention_mask", attention_mask, (B, past + T), dtype=torch.bool, optional=True)
        if self.pos is not None:  # learned or sinusoidal: a table of block_size positions
            note = f"block_size, the {self.cfg.positional} position table's length; past={past}, T={T}"
            check_int("sequence length past + T", past + T, max=self.cfg.block_size, note=note)
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
        check_int("sequence length T", T, max=self.position.num_embeddings, note="max_len, the position table's length")
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
        check_ids("input_ids", input_ids, self.cfg.vocab_size, shape=("B", "T"), dtype=ID_DTYPES)
        shape = tuple(input_ids.shape)  # (B, T)
        check_tensor(
            "attention_mask", attention_mask, shape, note="input_ids' shape, 1/True on real tokens", optional=True
        )
        check_ids(
            "token_type_ids", token_type_ids, self.cfg.type_vocab_size, shape=shape, optional=True, dtype=ID_DTYPES
        )
        attention_mask = None if attention_mask is None else attention_mask.bool()
        token_type_ids = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids  # one segment
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, d_model)
        hidden, attentions = [x], []
        for layer in self.layers:
            x = layer(x, attention_mask=attention_mask, need_weights=need_weights)
            hidden.append(x)
            if need_weights:
                attentions.append(layer.self_weights)
        return BertOutput(x, tuple(hidden), tuple(attentions))

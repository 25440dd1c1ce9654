"""The three Transformer families' configs: sizes and choices, checked when a config is made.

Used in chapters 04, 05 and 07.

* ``TransformerConfig``: the encoder-decoder's (``models.Transformer``), the paper's base model by default.
* ``GPTConfig``: a decoder-only model's (``models.GPT``), with its positional scheme (one of ``POSITIONAL``),
  grouped-query heads and a sliding window.
* ``BertConfig``: an encoder's (``models.BertEncoder``), all-MiniLM-L6-v2's shape by default.

Each has ``d_head``, one head's size, and checks its fields when it is made.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..utils.checks import check_bool, check_choice, check_equal, check_int, check_number, check_probability
from ..blocks.layers import ACTIVATIONS

POSITIONAL = ("learned", "sinusoidal", "rope", "alibi", "none")


# ----------------------------------------------------------------------------- checks
def _check_ints(cfg, *names: str, minimum: int = 1) -> None:
    """Each ``cfg.<name>`` must be an int >= ``minimum``: TypeError for another type, ValueError below it."""
    for name in names:
        value = getattr(cfg, name)
        check_int(f"{type(cfg).__name__}.{name}", value, min=minimum)


def _check_flags(cfg, *names: str) -> None:
    for name in names:
        check_bool(f"{type(cfg).__name__}.{name}", getattr(cfg, name))


def _check_dropout(cfg) -> None:
    check_probability(f"{type(cfg).__name__}.dropout", cfg.dropout)


def _check_heads(cfg) -> None:
    """``cfg.d_model`` must split into ``n_heads`` equal heads (call it once ``n_heads`` is checked an int >= 1)."""
    name, heads = f"{type(cfg).__name__}.d_model", cfg.n_heads
    check_int(name, cfg.d_model, min=1, multiple_of=heads, note=f"n_heads={heads} heads of equal size")


# ----------------------------------------------------------------------------- encoder-decoder
class _HeadSize:
    """``cfg.d_head``: each head's size, ``d_model // n_heads`` (exact: ``_check_heads`` makes ``d_model`` a multiple
    of ``n_heads``), for the three configs below."""

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


@dataclass
class TransformerConfig(_HeadSize):
    """The encoder-decoder's sizes. ``d_model``, ``n_heads``, ``d_ff``, the layer counts and ``dropout`` default to
    the paper's base model (Vaswani et al. 2017, table 3).

    ``share_embeddings=True`` uses one ``(vocab, d_model)`` matrix for the source embedding, the target embedding
    and the pre-softmax linear layer, as the paper does (section 3.4); it needs one vocabulary shared by source and
    target (``src_vocab_size == tgt_vocab_size``, the paper's joint BPE vocabulary of about 37000 tokens).
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1
    max_len: int = 512
    norm_first: bool = False
    activation: str = "relu"  # one of layers.ACTIVATIONS
    pad_id: int = 0
    share_embeddings: bool = False

    def __post_init__(self):
        _check_ints(
            self,
            "src_vocab_size",
            "tgt_vocab_size",
            "d_model",
            "n_heads",
            "d_ff",
            "n_encoder_layers",
            "n_decoder_layers",
            "max_len",
        )
        _check_flags(self, "norm_first", "share_embeddings")
        _check_dropout(self)
        _check_heads(self)
        check_choice("TransformerConfig.activation", self.activation, sorted(ACTIVATIONS))
        check_int(
            "TransformerConfig.d_model", self.d_model, multiple_of=2, note="sinusoidal positions pair sin and cos"
        )
        vocab = min(self.src_vocab_size, self.tgt_vocab_size)
        check_int("TransformerConfig.pad_id", self.pad_id, min=0, max=vocab - 1, note="a token of both vocabularies")
        if self.share_embeddings:  # one matrix for both embeddings and the output layer
            note = f"share_embeddings=True: one vocabulary for source and target, src_vocab_size={self.src_vocab_size}"
            check_equal("TransformerConfig.tgt_vocab_size", self.tgt_vocab_size, self.src_vocab_size, note=note)


# ----------------------------------------------------------------------------- decoder-only
@dataclass
class GPTConfig(_HeadSize):
    """A GPT's sizes. ``vocab_size`` has no default: it comes from the tokenizer the model reads (e.g.
    ``tokenizer.vocab_size``). The other defaults are a small model that trains in minutes on a CPU; the book's
    trained checkpoint stores its own config, so its shape is read from there, never from these defaults."""

    vocab_size: int
    block_size: int = 128  # context window
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_ff: int | None = None  # default 4 * d_model
    dropout: float = 0.0
    bias: bool = True
    positional: str = "learned"  # one of POSITIONAL
    n_kv_heads: int | None = None  # < n_heads: grouped-query attention (chapter 07); None = n_heads
    window: int | None = None  # sliding-window attention: each token sees itself and window - 1 before; None = all

    def __post_init__(self):
        _check_ints(self, "vocab_size", "block_size", "n_layers", "n_heads", "d_model")
        self.d_ff = 4 * self.d_model if self.d_ff is None else self.d_ff
        _check_ints(self, "d_ff")
        _check_dropout(self)
        _check_flags(self, "bias")
        check_choice("GPTConfig.positional", self.positional, POSITIONAL)
        _check_heads(self)
        check_int("GPTConfig.n_kv_heads", self.n_kv_heads, min=1, optional="n_heads: one key/value head per query head")
        if self.n_kv_heads is not None:  # each key/value head serves the same number of query heads
            note = f"n_kv_heads={self.n_kv_heads} key/value heads, each shared by n_heads // n_kv_heads query heads"
            check_int("GPTConfig.n_heads", self.n_heads, min=1, multiple_of=self.n_kv_heads, note=note)
        check_int("GPTConfig.window", self.window, min=1, optional="full attention")
        if self.positional == "rope":
            note = f"positional='rope' rotates feature pairs; d_model // n_heads = {self.d_model} // {self.n_heads}"
            check_int("GPTConfig.d_head", self.d_head, multiple_of=2, note=note)
        if self.positional == "sinusoidal":
            check_int("GPTConfig.d_model", self.d_model, multiple_of=2, note="sinusoidal positions pair sin and cos")


# ----------------------------------------------------------------------------- encoder-only
@dataclass
class BertConfig(_HeadSize):
    """Defaults are all-MiniLM-L6-v2's shape."""

    vocab_size: int = 30522
    d_model: int = 384
    n_heads: int = 12
    d_ff: int = 1536
    n_layers: int = 6
    max_len: int = 512
    type_vocab_size: int = 2
    eps: float = 1e-12
    dropout: float = 0.0

    def __post_init__(self):
        _check_ints(self, "vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len", "type_vocab_size")
        _check_dropout(self)
        _check_heads(self)
        check_number("BertConfig.eps", self.eps, 0, 1, min_open=True, max_open=True, note="a small positive float")

"""Chapter 09: how much memory a model's weights take, from its parameter count and the bits per weight of a format.

Used in chapters 09 and 11.

``transformer_params`` counts the parameters of a Transformer from its published configuration (checked against
models we can load: MiniLM, the book's GPT), so a deployment table's "memory" column can be recomputed: bytes =
parameters x bits per weight / 8. ``FORMATS`` gives the bits per weight of the usual formats, int4 with its share
of a float16 scale per group (``quant.storage.bits_per_weight``).
"""

from __future__ import annotations

from ..utils.checks import check_int, check_number
from ..quant.storage import bits_per_weight


def transformer_params(
    n_layers: int,
    d_model: int,
    d_ff: int,
    vocab_size: int,
    positions: int = 0,
    token_types: int = 0,
    bias: bool = True,
    norm_params: int = 2,
    gated_ffn: bool = False,
    tied_head: bool = True,
    pooler: bool = False,
    kv_dim: int | None = None,
) -> int:
    """Parameters of an encoder or decoder stack.

    Per layer: attention projections ``q`` (``d_model x d_model``), ``k`` and ``v`` (``d_model x kv_dim``, default
    ``d_model``; smaller with grouped-query attention), output (``d_model x d_model``); a feed-forward of two
    matrices (``gated_ffn``: three, as SwiGLU's gate, up and down); two norms of ``norm_params`` vectors each (2 for
    LayerNorm: weight and bias; 1 for RMSNorm). Outside the layers: token embeddings, learned ``positions`` and
    ``token_types`` (BERT), the embedding norm (BERT: post-norm, a norm after the embeddings; a pre-norm decoder:
    a final norm; both one norm), an untied output head (``tied_head=False``) and BERT's ``pooler``
    (``d_model x d_model`` + bias). ``bias``: every linear layer has a bias.
    """
    for name, value in (("n_layers", n_layers), ("d_model", d_model), ("d_ff", d_ff), ("vocab_size", vocab_size)):
        check_int(name, value, min=1)
    for name, value in (("positions", positions), ("token_types", token_types), ("norm_params", norm_params)):
        check_int(name, value, min=0)
    kv = d_model if kv_dim is None else check_int("kv_dim", kv_dim, min=1, optional="d_model")
    b = int(bias)
    attention = 2 * d_model * d_model + 2 * d_model * kv + b * (2 * d_model + 2 * kv)
    ffn = (3 if gated_ffn else 2) * d_model * d_ff + b * ((2 if gated_ffn else 1) * d_ff + d_model)
    layer = attention + ffn + 2 * norm_params * d_model
    outside = (vocab_size + positions + token_types) * d_model + norm_params * d_model
    outside += 0 if tied_head else vocab_size * d_model
    outside += d_model * d_model + d_model if pooler else 0
    return n_layers * layer + outside


def format_bits(group_size: int = 128, scale_bits: int = 16) -> dict[str, float]:
    """Bits per weight: ``{"fp32": 32, "fp16": 16, "int8": 8, "int4 g<group_size>": 4 + scale_bits/group_size}``
    (int8 with one scale per row of a long row counts as 8)."""
    int4 = bits_per_weight(4, (group_size,), "group", group_size, scale_bits)
    return {"fp32": 32.0, "fp16": 16.0, "int8": 8.0, f"int4 g{group_size}": int4}


def weight_bytes(n_params: int, bits: float) -> float:
    """Bytes of ``n_params`` weights at ``bits`` bits each."""
    check_int("n_params", n_params, min=0)
    check_number("bits", bits, min=0, min_open=True)
    return n_params * bits / 8


def memory_table(params: dict[str, int], group_size: int = 128) -> dict[str, dict[str, float]]:
    """``{model: {format: bytes}}`` for every model's parameter count in every ``format_bits`` format."""
    bits = format_bits(group_size)
    return {name: {fmt: weight_bytes(n, b) for fmt, b in bits.items()} for name, n in params.items()}

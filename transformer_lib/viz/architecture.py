"""The architecture diagram of a model, drawn from the model itself (its modules and config), not from a picture.

Used in chapters 00 and 05.

``architecture_columns(model)`` reads a ``Transformer``, ``GPT`` or ``BertEncoder`` and lists, column by column,
the boxes a diagram needs (embeddings, one repeated layer with its sub-layers in the order its ``Residual``s
apply them, the output head). ``plot_architecture(model)`` draws those columns with matplotlib, inputs at the
bottom as in Vaswani et al. 2017, figure 1. Change the model (pre-norm, no cross-attention, more layers) and the
figure changes with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import torch.nn as nn
from matplotlib.patches import FancyBboxPatch

from ..blocks.layers import DecoderLayer, EncoderLayer, Residual
from ..models.transformer import GPT, BertEncoder, Transformer
from ..utils.checks import check_type

COLORS = {
    "embed": "#f6d5e5",
    "attn": "#fbd9a6",
    "cross": "#f7b7a3",
    "ffn": "#b9d7f0",
    "norm": "#f4ef9c",
    "add": "#e3e3e3",
    "out": "#cfe8c6",
    "io": "#ffffff",
}


@dataclass
class Box:
    """One box of the diagram: its text and its kind (a key of ``COLORS``)."""

    text: str
    kind: str


@dataclass
class Column:
    """A stack drawn bottom to top: ``below`` the repeated layer, the layer itself (``layer``, drawn once
    inside a frame marked ``x n_layers``), then ``above``. ``residuals`` are (first, last) box indices in
    ``layer`` spanned by a skip connection."""

    title: str
    below: list[Box]
    layer: list[Box]
    n_layers: int
    above: list[Box]
    residuals: list[tuple[int, int]] = field(default_factory=list)
    cross_box: int | None = None  # index in ``layer`` of the cross-attention box (receives the memory arrow)


def _sublayer(label: str, kind: str, res: Residual, boxes: list[Box], residuals: list) -> int:
    """Append one sub-layer with its residual and norm in the order ``res`` applies them; return the
    index of the sub-layer's own box."""
    start = len(boxes)
    has_norm = not isinstance(res.norm, nn.Identity)
    if res.norm_first:  # pre-norm: x + f(LN(x))
        if has_norm:
            boxes.append(Box("LayerNorm", "norm"))
        boxes.append(Box(label, kind))
        boxes.append(Box("Add (residual)", "add"))
    else:  # post-norm: LN(x + f(x))
        boxes.append(Box(label, kind))
        boxes.append(Box("Add & LayerNorm" if has_norm else "Add (residual)", "add" if not has_norm else "norm"))
    residuals.append((start, len(boxes) - 1))
    return len(boxes) - 2


def _attn_label(name: str, mha) -> str:
    return f"{name}\n{mha.n_heads} heads x {mha.d_head}"


def _ffn_label(ffn) -> str:
    return f"Feed-forward\n{ffn.up.in_features} -> {ffn.up.out_features} -> {ffn.down.out_features}"


def _layer_boxes(layer: nn.Module) -> tuple[list[Box], list[tuple[int, int]], int | None]:
    check_type("layer", layer, (EncoderLayer, DecoderLayer))
    boxes, residuals, cross = [], [], None
    if isinstance(layer, EncoderLayer):
        _sublayer(_attn_label("Self-attention", layer.self_attn), "attn", layer.res_self, boxes, residuals)
    else:  # a DecoderLayer
        _sublayer(_attn_label("Masked self-attention", layer.self_attn), "attn", layer.res_self, boxes, residuals)
        if layer.cross_attn is not None:
            cross = _sublayer(
                _attn_label("Cross-attention", layer.cross_attn), "cross", layer.res_cross, boxes, residuals
            )
    _sublayer(_ffn_label(layer.ffn), "ffn", layer.res_ffn, boxes, residuals)
    return boxes, residuals, cross


def _norm_box(module: nn.Module) -> list[Box]:
    return [] if isinstance(module, nn.Identity) else [Box("LayerNorm (final)", "norm")]


def architecture_columns(model: nn.Module) -> list[Column]:
    """The diagram's columns for a ``Transformer`` (encoder, decoder), a ``GPT`` or a ``BertEncoder``."""
    check_type("model", model, (Transformer, GPT, BertEncoder))
    if isinstance(model, Transformer):
        c = model.cfg
        emb = Box(f"Embedding + sinusoidal positions\nd_model = {c.d_model}", "embed")
        src = Box(f"Source tokens (B, S)\nvocabulary {c.src_vocab_size}", "io")
        tgt = Box(f"Target tokens, shifted right (B, T)\nvocabulary {c.tgt_vocab_size}", "io")
        shared = " (shared embedding matrix)" if model.generator.weight is model.tgt_emb.weight else ""
        head = Box(f"Linear{shared} -> softmax\nnext-token probabilities ({c.tgt_vocab_size})", "out")
        layer, res, _ = _layer_boxes(model.encoder[0])
        enc = Column(
            "Encoder",
            [src, emb],
            layer,
            len(model.encoder),
            _norm_box(model.enc_norm) + [Box("memory (B, S, d_model)", "io")],
            res,
        )
        layer, res, cross = _layer_boxes(model.decoder[0])
        dec = Column("Decoder", [tgt, emb], layer, len(model.decoder), _norm_box(model.dec_norm) + [head], res, cross)
        return [enc, dec]
    if isinstance(model, GPT):
        c = model.cfg
        pos = {
            "learned": "learned positions",
            "sinusoidal": "sinusoidal positions",
            "rope": "(RoPE inside attention)",
            "alibi": "(ALiBi bias inside attention)",
            "none": "(no positions)",
        }[c.positional]
        tied = " (tied to embedding)" if model.lm_head.weight is model.tok_emb.weight else ""
        below = [
            Box(f"Tokens (B, T), context {c.block_size}\nvocabulary {c.vocab_size}", "io"),
            Box(f"Token embedding + {pos}\nd_model = {c.d_model}", "embed"),
        ]
        head = Box(f"Linear{tied} -> softmax\nnext-token probabilities ({c.vocab_size})", "out")
        layer, res, _ = _layer_boxes(model.blocks[0])
        return [Column("Decoder-only (GPT)", below, layer, len(model.blocks), _norm_box(model.norm) + [head], res)]
    c = model.cfg  # a BertEncoder: the one type left
    below = [
        Box(f"Tokens (B, T) with [CLS] ... [SEP]\nvocabulary {c.vocab_size}", "io"),
        Box(f"Token + position + segment embedding,\nLayerNorm; d_model = {c.d_model}", "embed"),
    ]
    layer, res, _ = _layer_boxes(model.layers[0])
    return [
        Column(
            "Encoder-only (BERT)",
            below,
            layer,
            len(model.layers),
            [Box("One vector per token (B, T, d_model)", "out")],
            res,
        )
    ]


# ----------------------------------------------------------------------------- drawing
_W, _H, _GAP = 2.6, 0.62, 0.32  # box width, box height, vertical gap (data units)


def _draw_box(ax, x: float, y: float, box: Box) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x - _W / 2, y),
            _W,
            _H,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            fc=COLORS[box.kind],
            ec="#444444",
            lw=0.9,
        )
    )
    ax.text(x, y + _H / 2, box.text, ha="center", va="center", fontsize=7.2)


def _arrow(ax, x0, y0, x1, y1, **kw) -> None:
    style = dict(arrowstyle="-|>", color="#333333", lw=0.9, shrinkA=0, shrinkB=0)
    style.update(kw)
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=style)


def _draw_column(ax, col: Column, x: float) -> dict:
    """Draw one column; return the y of every layer box (for the memory arrow) and the column's top."""
    y, step = 0.0, _H + _GAP
    prev_top = None
    ys = {}

    def place(box: Box, key):
        nonlocal y, prev_top
        if prev_top is not None:
            _arrow(ax, x, prev_top, x, y)
        _draw_box(ax, x, y, box)
        ys[key] = y
        prev_top = y + _H
        y += step

    for i, box in enumerate(col.below):
        place(box, ("below", i))
    y += 0.15
    layer_start = y - 0.2
    for i, box in enumerate(col.layer):
        place(box, ("layer", i))
    layer_end = y - _GAP + 0.2
    frame = FancyBboxPatch(
        (x - _W / 2 - 0.35, layer_start),
        _W + 0.7,
        layer_end - layer_start,
        boxstyle="round,pad=0.02,rounding_size=0.15",
        fc="none",
        ec="#777777",
        lw=1.0,
        ls="--",
    )
    ax.add_patch(frame)
    ax.text(
        x - _W / 2 - 0.45,
        layer_start + 0.1,
        f"x {col.n_layers}",
        ha="right",
        va="bottom",
        fontsize=10,
        fontweight="bold",
    )
    for first, last in col.residuals:  # skip connections on the right-hand side
        y0, y1 = ys[("layer", first)] - _GAP / 2, ys[("layer", last)] + _H / 2
        xr = x + _W / 2 + 0.18
        ax.plot([x, xr, xr], [y0, y0, y1], color="#2a7ab0", lw=1.0)
        _arrow(ax, xr, y1, x + _W / 2, y1, color="#2a7ab0")
    y += 0.15
    for i, box in enumerate(col.above):
        place(box, ("above", i))
    ax.text(x, y + 0.05, col.title, ha="center", va="bottom", fontsize=10, fontweight="bold")
    return {"ys": ys, "top": y}


def plot_architecture(model: nn.Module, title: str | None = None, ax=None):
    """Draw ``model``'s architecture (see ``architecture_columns``). Returns the matplotlib ``Figure``.

    Blue lines on the right of each sub-layer are the residual (skip) connections; the dashed frame is one
    layer, repeated ``n_layers`` times. For an encoder-decoder, the arrow from the encoder's output into
    every decoder layer's cross-attention carries the memory (its keys and values).
    """
    cols = architecture_columns(model)
    n_boxes = max(len(c.below) + len(c.layer) + len(c.above) for c in cols)
    height = n_boxes * (_H + _GAP) + 1.0
    if ax is None:
        _, ax = plt.subplots(figsize=(3.6 * len(cols) + 0.6, 0.5 * height + 0.6))
    xs = [i * 5.0 for i in range(len(cols))]
    drawn = [_draw_column(ax, c, x) for c, x in zip(cols, xs)]
    if len(cols) == 2 and cols[1].cross_box is not None:  # memory: encoder top -> decoder cross-attention
        enc_top = drawn[0]["ys"][("above", len(cols[0].above) - 1)] + _H
        y_cross = drawn[1]["ys"][("layer", cols[1].cross_box)] + _H / 2
        xm, y_top = xs[0] + _W / 2 + 0.75, enc_top + 0.3
        ax.plot([xs[0], xs[0], xm, xm], [enc_top, y_top, y_top, y_cross], color="#c0392b", lw=1.2)
        _arrow(ax, xm, y_cross, xs[1] - _W / 2, y_cross, color="#c0392b", lw=1.2)
        ax.text(xm + 0.08, y_top - 0.08, "memory\n(keys, values)", ha="left", va="top", fontsize=7, color="#c0392b")
    top = max(d["top"] for d in drawn) + 0.5
    ax.set_xlim(xs[0] - _W / 2 - 1.0, xs[-1] + _W / 2 + 0.6)
    ax.set_ylim(-0.3, top + 0.7 if len(cols) == 2 else top)
    ax.set_axis_off()
    n_params = sum(p.numel() for p in model.parameters())
    ax.set_title(title or f"{type(model).__name__}: {n_params:,} parameters", fontsize=11)
    return ax.figure

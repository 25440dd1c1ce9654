"""Live figures: widgets whose JavaScript computes the figure in the reader's browser.

Used in chapters 04, 07, 09, 10 and 11.

A live widget is an ``anywidget.AnyWidget`` whose front-end is the ES module ``js/<name>.js`` (imports linked
by ``esm.bundle``). Python hands over numbers only (synced traits, compactly encoded) and checks them; the
browser recomputes the figure on every input event, writes the reader's choices back to the traits
(``model.set``, ``model.save_changes``: with a kernel, ``widget.layer`` is what the reader picked) and redraws
when Python sets one. Displayed, a live figure first writes a static picture of its default state
(``static_html``, made in ``live_static``), which the figure hides once drawn. It renders with a kernel
(JupyterLab, VS Code, Colab) and in the static book, which serves anywidget's front-end itself
(``tools/vendor_static.py``, ``book/static/widgets-setup.js``). To add a figure: write ``js/<name>.js``
(``export default { render }``), a ``LiveWidget`` subclass (``script``, traits, checks) and its ``picture``.
"""

from __future__ import annotations

import base64
import uuid
from functools import partial
from typing import Sequence

import anywidget
import numpy as np
import torch
import traitlets

from ..utils.checks import check_choice, check_int, check_number, check_sequence, check_tensor, check_type
from . import live_static
from .esm import JS_DIR, bundle  # noqa: F401  (JS_DIR: where the figures' modules live, for the tests)


def encode_float32(x: torch.Tensor | np.ndarray) -> str:
    """Base64 of ``x`` as little-endian float32, flattened in C order (decoded by ``decodeFloat32`` in JS)."""
    a = x.detach().cpu().float().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float32)
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def check_range(name: str, value, low, high, kind=int) -> None:
    """Raise unless ``value`` is a ``kind`` (int, or float for any finite real; bools refused) in ``[low, high]``:
    ``TypeError`` for the type, ``ValueError`` for the range (``checks.check_int`` / ``check_number``)."""
    if kind is float:
        check_number(name, value, low, high)
    else:
        check_int(name, value, low, high)


class LiveWidget(anywidget.AnyWidget):
    """Base class of the book's live figures: a subclass names its ``script`` in ``js/``, declares traits and
    names its static ``picture`` (a function of ``live_static``), which displaying the widget writes first."""

    script: str = ""
    picture: str = ""
    fallback_id = traitlets.Unicode("").tag(sync=True)  # the id of the static picture the live figure hides

    def __init_subclass__(cls, **kwargs):
        if cls.__dict__.get("script"):
            cls._esm = bundle(cls.script)  # js/<script>, its imports linked in
        super().__init_subclass__(**kwargs)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.fallback_id = f"tl-fallback-{uuid.uuid4().hex[:12]}"

    def static_html(self) -> str:
        """A ``<figure>`` of the default state (the traits as given to the constructor), with alt text."""
        return getattr(live_static, self.picture)(self)

    def _ipython_display_(self):
        live_static.display_with_picture(self)


# ----------------------------------------------------------------------------- positions (chapter 04)


class SinusoidTable(LiveWidget):
    """The sinusoidal table ``PE[pos, i]`` for any even ``d_model`` and position, computed in the browser.

    Shows positions ``0 .. n_positions - 1``, the chosen ``position``'s row, and the dot product of two
    positions' vectors (``position`` and ``other``) with the curve ``PE[position] . PE[pos]`` over every ``pos``.
    """

    script = "positional.js"
    figure = traitlets.Unicode("table").tag(sync=True)
    d_model = traitlets.Int(64).tag(sync=True)
    max_d_model = traitlets.Int(512).tag(sync=True)
    n_positions = traitlets.Int(100).tag(sync=True)
    position = traitlets.Int(10).tag(sync=True)
    other = traitlets.Int(20).tag(sync=True)

    picture = "sinusoid_table"  # live_static.sinusoid_table: the static picture

    def __init__(
        self, d_model: int = 64, position: int = 10, other: int = 20, n_positions: int = 100, max_d_model: int = 512
    ):
        check_range("max_d_model", max_d_model, 2, 4096)
        check_int("d_model", d_model, 2, max_d_model, multiple_of=2, note="sin and cos pairs")
        check_range("n_positions", n_positions, 2, 1000)
        check_range("position", position, 0, n_positions - 1)
        check_range("other", other, 0, n_positions - 1)
        super().__init__(
            d_model=d_model, position=position, other=other, n_positions=n_positions, max_d_model=max_d_model
        )


class RopeRotation(LiveWidget):
    """RoPE in the browser: each pair of a query ``q`` at position ``m`` and a key ``k`` at position ``n``
    turns by ``pos * theta_i``; the score ``RoPE(q, m) . RoPE(k, n)`` depends only on ``m - n``.

    ``q, k: (d_head,)`` with ``d_head`` even (at most 64, so every pair is drawn).
    """

    script = "positional.js"
    figure = traitlets.Unicode("rope").tag(sync=True)
    q = traitlets.Unicode().tag(sync=True)  # base64 float32
    k = traitlets.Unicode().tag(sync=True)
    m = traitlets.Int(3).tag(sync=True)
    n = traitlets.Int(1).tag(sync=True)
    base = traitlets.Float(10000.0).tag(sync=True)
    max_position = traitlets.Int(64).tag(sync=True)

    picture = "rope_rotation"  # live_static.rope_rotation: the static picture

    def __init__(
        self, q: torch.Tensor, k: torch.Tensor, m: int = 3, n: int = 1, max_position: int = 64, base: float = 10000.0
    ):
        check_tensor("q", q, ("d_head",), finite=True)
        check_int("d_head", q.shape[0], 2, 64, multiple_of=2, note="q's size: pairs, each drawn")
        check_tensor("k", k, tuple(q.shape), finite=True, note="q's shape")
        check_range("max_position", max_position, 1, 100_000)
        check_range("m", m, 0, max_position)
        check_range("n", n, 0, max_position)
        check_range("base", base, 2.0, 1e7, float)
        super().__init__(
            q=encode_float32(q), k=encode_float32(k), m=m, n=n, max_position=max_position, base=float(base)
        )


# ----------------------------------------------------------------------- KV cache (chapter 07)


class KVCacheCalculator(LiveWidget):
    """The KV cache's size ``2 x n_layers x batch x n_kv_heads x d_head x T x bytes`` for a table of models.

    ``models``: rows ``(name, n_layers, n_kv_heads, d_head, context_length, bytes_per_element)``; the reader
    picks one and changes any of its numbers (``kv_cache.kv_cache_bytes`` is the Python twin).
    """

    script = "kvcache.js"
    models = traitlets.List(traitlets.List()).tag(sync=True)
    max_length = traitlets.Int(32768).tag(sync=True)
    preset = traitlets.Int(0).tag(sync=True)  # the row of ``models`` picked last
    selection = traitlets.Dict().tag(sync=True)  # the reader's numbers: kv_cache_bytes(**selection); {}: row 0's

    picture = "kv_cache_calculator"  # live_static.kv_cache_calculator: the static picture

    def __init__(self, models: Sequence[tuple], max_length: int = 32768):
        row = "(name, n_layers, n_kv_heads, d_head, context_length, bytes_per_element)"
        check_sequence("models", models, min_len=1, note=f"one {row} row per model")
        check_range("max_length", max_length, 1, 1 << 20)
        limits = (("n_layers", 128), ("n_kv_heads", 128), ("d_head", 256), ("context_length", max_length))
        for r, m in enumerate(models):
            check_sequence(f"models[{r}]", m, length=6, note=row)
            check_type(f"models[{r}] name", m[0], str)
            for (name, high), value in zip(limits, m[1:5]):
                check_range(f"models[{r}] {name}", value, 1, high)
            check_choice(f"models[{r}] bytes_per_element", m[5], (1, 2, 4))
        super().__init__(models=[list(m) for m in models], max_length=max_length)


# ----------------------------------------------------------------------- quantization (chapter 09)


class QuantGrid(LiveWidget):
    """Absmax quantization of one weight ``row: (K,)`` at any bits, group size and outlier, in the browser.

    ``group_options``: group sizes dividing ``K`` (``None``: one scale for the row). ``outlier``: the factor
    applied to the row's largest ``|w|`` (1 = the row as it is), up to ``max_outlier``.
    """

    script = "quant.js"
    row = traitlets.Unicode().tag(sync=True)  # base64 float32
    bits = traitlets.Int(4).tag(sync=True)
    bits_options = traitlets.List(traitlets.Int()).tag(sync=True)
    group_size = traitlets.Int(0).tag(sync=True)  # 0: one scale per row
    group_options = traitlets.List(traitlets.Int()).tag(sync=True)
    outlier = traitlets.Float(1.0).tag(sync=True)
    max_outlier = traitlets.Float(10.0).tag(sync=True)

    picture = "quant_grid"  # live_static.quant_grid: the static picture

    def __init__(
        self,
        row: torch.Tensor,
        bits: int = 4,
        group_size: int | None = None,
        bits_options: Sequence[int] = (2, 3, 4, 8),
        group_options: Sequence[int | None] = (None, 128, 32, 8),
        outlier: float = 1.0,
        max_outlier: float = 10.0,
    ):
        check_tensor("row", row, ("K",), floating=True, finite=True, note="one weight row")
        K = check_int("K", row.shape[0], min=2, note="row's length")
        check_sequence("bits_options", bits_options, min_len=1, items=partial(check_int, min=2, max=8))
        divisors = [d for d in range(1, K + 1) if K % d == 0]  # the group sizes that split the row evenly
        for i, g in enumerate(group_options):
            if g is not None:  # None: one scale for the row
                check_choice(f"group_options[{i}]", check_int(f"group_options[{i}]", g), divisors)
        check_choice("bits", bits, bits_options)
        if group_size is not None or None not in group_options:  # check_choice cannot sort None among ints
            check_choice("group_size", group_size, [g for g in group_options if g is not None])
        check_range("max_outlier", max_outlier, 1.0, 1000.0, float)
        check_range("outlier", outlier, 1.0, max_outlier, float)
        super().__init__(
            row=encode_float32(row),
            bits=bits,
            bits_options=list(bits_options),
            group_size=group_size or 0,
            group_options=[g or 0 for g in group_options],
            outlier=float(outlier),
            max_outlier=float(max_outlier),
        )


# ----------------------------------------------------------------------- online softmax, tile by tile (chapter 10)


class OnlineSoftmaxTiles(LiveWidget):
    """One block of queries ``q: (bq, d)`` swept over keys ``k: (Tk, d)`` and values ``v: (Tk, d_v)`` tile by
    tile: the scores folded in so far, the running max ``m``, sum ``l`` and output ``o / l`` after each tile,
    for every tile size in ``block_options`` (``flash.trace_one_query_block`` is the Python twin).
    """

    script = "flash.js"
    q = traitlets.Unicode().tag(sync=True)  # base64 float32, (bq, d) row by row
    k = traitlets.Unicode().tag(sync=True)
    v = traitlets.Unicode().tag(sync=True)
    bq = traitlets.Int().tag(sync=True)
    t_k = traitlets.Int().tag(sync=True)
    d = traitlets.Int().tag(sync=True)
    d_v = traitlets.Int().tag(sync=True)
    block_k = traitlets.Int().tag(sync=True)
    block_options = traitlets.List(traitlets.Int()).tag(sync=True)

    picture = "online_softmax_tiles"  # live_static.online_softmax_tiles: the static picture

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        block_k: int = 8,
        block_options: Sequence[int] = (1, 4, 8, 16),
    ):
        check_tensor("q", q, ("bq", "d"), floating=True, finite=True)
        check_tensor("k", k, ("Tk", q.shape[1]), floating=True, finite=True, note="(Tk, d), d as in q")
        check_tensor("v", v, (k.shape[0], "d_v"), floating=True, finite=True, note="(Tk, d_v), Tk as in k")
        check_range("bq", q.shape[0], 1, 16)
        check_range("Tk", k.shape[0], 1, 256)
        check_sequence("block_options", block_options, min_len=1, items=partial(check_int, min=1, max=k.shape[0]))
        check_choice("block_k", block_k, block_options)
        super().__init__(
            q=encode_float32(q),
            k=encode_float32(k),
            v=encode_float32(v),
            bq=q.shape[0],
            t_k=k.shape[0],
            d=q.shape[1],
            d_v=v.shape[1],
            block_k=block_k,
            block_options=list(block_options),
        )


# ----------------------------------------------------------------------- mixture of experts (chapter 11)


class ExpertRouting(LiveWidget):
    """The experts a router picks for each token of a sentence, per layer: top-k gates recomputed in the browser.

    ``tokens``: the ``T`` tokens; ``logits: (n_layers, T, n_experts)`` router scores
    (``experiments.moe_vs_dense.router_logits``). The reader picks the layer and ``k``; the figure shows each token's
    gate weights and each expert's share.
    """

    script = "routing.js"
    tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    logits = traitlets.Unicode().tag(sync=True)  # base64 float32, (L, T, E) row by row
    n_layers = traitlets.Int().tag(sync=True)
    n_experts = traitlets.Int().tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    top_k = traitlets.Int(2).tag(sync=True)

    picture = "expert_routing"  # live_static.expert_routing: the static picture

    def __init__(self, tokens: Sequence[str], logits: torch.Tensor, layer: int = 0, top_k: int = 2):
        T = len(check_sequence("tokens", tokens, min_len=1))
        check_tensor("logits", logits, (None, T, None), finite=True, note="(n_layers, T, n_experts), T = len(tokens)")
        check_int("logits.shape[2]", logits.shape[2], min=2, note="n_experts: a router picks among two or more")
        L, _, E = logits.shape
        check_range("layer", layer, 0, L - 1)
        check_range("top_k", top_k, 1, E)
        super().__init__(
            tokens=list(map(str, tokens)),
            logits=encode_float32(logits),
            n_layers=L,
            n_experts=E,
            layer=layer,
            top_k=top_k,
        )

"""Live figures of attention: the maps of every layer and head at any temperature, and one
query's scores, weights and weighted values step by step, computed in the reader's browser.

Used in chapters 02 and 03.

``AttentionHeatmap`` (``js/attention.js``) takes a ``BertEncoder``'s scaled scores (``scaled_scores``) and lets the
reader pick the sentence, layer, head and temperature; ``AttentionSteps`` (``js/steps.js``) takes one sentence's
``q``, ``k`` and ``v``. Both are ``live.LiveWidget``s: see ``viz/live.py`` for how a live figure works.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import traitlets

from .live import LiveWidget, check_range, encode_float32


@torch.no_grad()
def scaled_scores(model, tokenizer, sentence: str) -> tuple[list[str], torch.Tensor]:
    """Every head's scaled scores ``S = q k^T / sqrt(d_head)`` of a ``BertEncoder`` on one sentence.

    Returns ``(tokens, scores)`` with ``scores: (n_layers, n_heads, T, T)`` float32 on the CPU;
    ``softmax(S / tau)`` is that head's attention map at temperature ``tau`` (``attention_maps`` at ``tau = 1``).
    """
    device = next(model.parameters()).device
    enc = {name: t.to(device) for name, t in tokenizer.encode(sentence).items()}  # each (1, T)
    hidden = model(**enc).hidden_states  # the input of layer l is hidden[l]: (1, T, d_model)
    scores = []
    for layer, block in enumerate(model.layers):
        q, k, _ = block.self_attn.project_qkv(hidden[layer])  # each (1, H, T, d_head)
        scores.append(q[0].float() @ k[0].float().transpose(-1, -2) / math.sqrt(q.shape[-1]))  # (H, T, T)
    return tokenizer.tokens(sentence), torch.stack(scores).cpu()


class AttentionHeatmap(LiveWidget):
    """Attention maps ``softmax(S / tau)`` of every layer and head, recomputed in the browser.

    ``tokens[s]``: the ``T_s`` word pieces of sentence ``s``; ``scores[s]: (n_layers, n_heads, T_s, T_s)`` its
    scaled scores (see ``scaled_scores``). ``mode="one"`` shows one head (pick layer and head), ``"all"`` every
    head of the picked layer side by side, each captioned with ``head_labels[s][layer][head]`` when given. The
    reader moves ``temperature`` continuously in ``[tau_min, tau_max]``, reads the weight under the pointer and a
    row's entropy (bits) on click.
    """

    script = "attention.js"
    tokens = traitlets.List(traitlets.List(traitlets.Unicode())).tag(sync=True)
    scores = traitlets.List(traitlets.Unicode()).tag(sync=True)  # base64 float32, one per sentence
    n_layers = traitlets.Int().tag(sync=True)
    n_heads = traitlets.Int().tag(sync=True)
    sentence = traitlets.Int(0).tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(0).tag(sync=True)
    temperature = traitlets.Float(1.0).tag(sync=True)
    tau_min = traitlets.Float(0.05).tag(sync=True)
    tau_max = traitlets.Float(5.0).tag(sync=True)
    mode = traitlets.Unicode("one").tag(sync=True)
    head_labels = traitlets.List().tag(sync=True)  # per sentence, (n_layers, n_heads) strings, or empty

    picture = "attention_heatmap"  # live_static.attention_heatmap: the static picture

    def __init__(
        self,
        tokens: Sequence[Sequence[str]],
        scores: Sequence[torch.Tensor],
        layer: int = 0,
        head: int = 0,
        temperature: float = 1.0,
        mode: str = "one",
        sentence: int = 0,
        tau_min: float = 0.05,
        tau_max: float = 5.0,
        head_labels: Sequence | None = None,
    ):
        if len(tokens) == 0 or len(tokens) != len(scores):
            raise ValueError(
                f"tokens and scores must be non-empty lists of the same length (one per sentence), "
                f"got {len(tokens)} and {len(scores)}"
            )
        shape = None
        for s, (toks, sc) in enumerate(zip(tokens, scores)):
            T = len(toks)
            if not isinstance(sc, torch.Tensor) or sc.dim() != 4 or tuple(sc.shape[-2:]) != (T, T):
                got = tuple(sc.shape) if isinstance(sc, torch.Tensor) else type(sc).__name__
                raise ValueError(
                    f"scores[{s}] must be a tensor (n_layers, n_heads, T, T) with T = len(tokens[{s}]) = {T}, got {got}"
                )
            if shape is not None and tuple(sc.shape[:2]) != shape:
                raise ValueError(
                    f"scores[{s}] has (n_layers, n_heads) = {tuple(sc.shape[:2])}, expected {shape} as in scores[0]"
                )
            if not torch.isfinite(sc).all():
                raise ValueError(f"scores[{s}] must be finite (no NaN or inf)")
            shape = tuple(sc.shape[:2])
        if mode not in ("one", "all"):
            raise ValueError(f"mode must be 'one' or 'all', got {mode!r}")
        check_range("tau_min", tau_min, 1e-3, 100.0, float)
        check_range("tau_max", tau_max, tau_min, 100.0, float)
        check_range("temperature", temperature, tau_min, tau_max, float)
        check_range("layer", layer, 0, shape[0] - 1)
        check_range("head", head, 0, shape[1] - 1)
        check_range("sentence", sentence, 0, len(tokens) - 1)
        labels = [] if head_labels is None else [[[str(x) for x in row] for row in per] for per in head_labels]
        if labels and (
            len(labels) != len(tokens)
            or any(len(per) != shape[0] or any(len(r) != shape[1] for r in per) for per in labels)
        ):
            raise ValueError(
                f"head_labels must hold, per sentence, (n_layers, n_heads) = {shape} strings for "
                f"{len(tokens)} sentence(s)"
            )
        super().__init__(
            tokens=[list(map(str, t)) for t in tokens],
            scores=[encode_float32(s) for s in scores],
            n_layers=shape[0],
            n_heads=shape[1],
            layer=layer,
            head=head,
            temperature=float(temperature),
            mode=mode,
            sentence=sentence,
            tau_min=float(tau_min),
            tau_max=float(tau_max),
            head_labels=labels,
        )

    @classmethod
    def from_model(cls, model, tokenizer, sentences: Sequence[str], **kwargs) -> "AttentionHeatmap":
        """Run ``model`` once per sentence and show its heads (``kwargs`` as for the constructor)."""
        if isinstance(sentences, str) or len(sentences) == 0:
            raise ValueError(f"sentences must be a non-empty list of strings, got {sentences!r}")
        pairs = [scaled_scores(model, tokenizer, s) for s in sentences]
        return cls([p[0] for p in pairs], [p[1] for p in pairs], **kwargs)


class AttentionSteps(LiveWidget):
    """Scaled dot-product attention for one query at a time: scores, softmax weights, weighted values.

    ``q, k: (T, d_k)``, ``v: (T, d_v)`` for the ``T`` ``tokens``; ``features`` optionally names the ``d_v``
    value dimensions. The reader picks the query token and a temperature.
    """

    script = "steps.js"
    tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    features = traitlets.List(traitlets.Unicode()).tag(sync=True)
    q = traitlets.Unicode().tag(sync=True)  # base64 float32, (T, d) row by row
    k = traitlets.Unicode().tag(sync=True)
    v = traitlets.Unicode().tag(sync=True)
    d = traitlets.Int().tag(sync=True)
    d_v = traitlets.Int().tag(sync=True)
    query = traitlets.Int(0).tag(sync=True)
    temperature = traitlets.Float(1.0).tag(sync=True)

    picture = "attention_steps"  # live_static.attention_steps: the static picture

    def __init__(
        self,
        tokens: Sequence[str],
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        features: Sequence[str] = (),
        query: int = 0,
        temperature: float = 1.0,
    ):
        T = len(tokens)
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] != T or not torch.isfinite(x).all():
                got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
                raise ValueError(f"{name} must be a finite (T, d) tensor with T = len(tokens) = {T}, got {got}")
        if q.shape != k.shape:
            raise ValueError(f"q and k must have the same shape (T, d_k), got {tuple(q.shape)} and {tuple(k.shape)}")
        if features and len(features) != v.shape[1]:
            raise ValueError(f"features must name the d_v = {v.shape[1]} value dimensions, got {len(features)} names")
        check_range("query", query, 0, T - 1)
        check_range("temperature", temperature, 0.05, 5.0, float)
        super().__init__(
            tokens=list(map(str, tokens)),
            features=list(map(str, features)),
            q=encode_float32(q),
            k=encode_float32(k),
            v=encode_float32(v),
            d=q.shape[1],
            d_v=v.shape[1],
            query=query,
            temperature=float(temperature),
        )

"""Live figures of attention: the maps of every layer and head at any temperature, and one
query's scores, weights and weighted values step by step, computed in the reader's browser.

Used in chapters 02 and 03.

``AttentionHeatmap`` (``js/attention.js``) takes a ``BertEncoder``'s scaled scores (``scaled_scores``) and lets the
reader pick the sentence, layer, head and temperature; ``AttentionSteps`` (``js/steps.js``) takes one sentence's
``q``, ``k`` and ``v``. Both are ``live.LiveWidget``s: see ``viz/live.py`` for how a live figure works.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Sequence

import torch
import traitlets

from ..utils.checks import check_choice, check_equal, check_sequence, check_tensor
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
        check_sequence("tokens", tokens, min_len=1, note="one list of word pieces per sentence")
        check_sequence("scores", scores, length=len(tokens), note="one tensor per sentence, the same length as tokens")
        for s, (toks, sc) in enumerate(zip(tokens, scores)):
            lead = tuple(scores[0].shape[:2]) if s else (None, None)  # (n_layers, n_heads): scores[0]'s
            note = f"(n_layers, n_heads, T, T), T = len(tokens[{s}]), n_layers and n_heads as in scores[0]"
            check_tensor(f"scores[{s}]", sc, (*lead, len(toks), len(toks)), finite=True, note=note)
        shape = tuple(scores[0].shape[:2])  # (n_layers, n_heads)
        check_choice("mode", mode, ("one", "all"))
        check_range("tau_min", tau_min, 1e-3, 100.0, float)
        check_range("tau_max", tau_max, tau_min, 100.0, float)
        check_range("temperature", temperature, tau_min, tau_max, float)
        check_range("layer", layer, 0, shape[0] - 1)
        check_range("head", head, 0, shape[1] - 1)
        check_range("sentence", sentence, 0, len(tokens) - 1)
        if head_labels:  # per sentence, a list of n_layers lists of n_heads labels
            heads = partial(check_sequence, length=shape[1], note="one label per head")
            layers = partial(check_sequence, length=shape[0], note="one list per layer", items=heads)
            check_sequence("head_labels", head_labels, length=len(tokens), note="one per sentence", items=layers)
        labels = [] if head_labels is None else [[[str(x) for x in row] for row in per] for per in head_labels]
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
        check_sequence("sentences", sentences, min_len=1, items=str)
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
            check_tensor(name, x, (T, None), finite=True, note=f"(T, d), T = len(tokens) = {T}")
        check_equal("k.shape", tuple(k.shape), tuple(q.shape), note="q's: (T, d_k)")
        if features:
            check_sequence("features", features, length=v.shape[1], note="a name for each of v's d_v dimensions")
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

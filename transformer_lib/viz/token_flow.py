"""Follow one token through a GPT: ids -> embedding -> attention -> feed-forward -> next-token probabilities.

Used in chapter 00.

``trace_token_flow(model, ids)`` runs one forward pass of a library ``GPT`` (its own ``forward``, watched by
hooks) and keeps what each stage produces. ``TokenFlow`` hands those numbers to
the reader's browser (``js/token_flow.js``), which lets them pick a position, a layer, a head and a stage, and
computes what it shows: the attention row's largest weight, the probabilities ``exp(z - logsumexp(z))`` of the
likeliest next tokens. Chapter 00 shows it on the Shakespeare GPT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import traitlets

from ..utils.checks import check_tensor
from ..models.transformer import GPT
from ..utils.modes import eval_mode
from .live import LiveWidget, check_range, encode_float32

STAGES = ("ids", "embedding", "attention", "feed-forward", "probabilities")


@dataclass
class FlowRecord:
    """What each stage of one forward pass produced, for one sequence of ``T`` tokens (float32, on the CPU).

    ``embedding: (T, d_model)`` the first block's input; ``attention: (L, H, T, T)`` each layer's and head's
    weights; ``attn_out, ffn_out: (L, T, d_model)`` what the attention and feed-forward sub-layers add to the
    residual stream; ``logits: (T, V)`` the next-token scores at every position.
    """

    ids: list[int]
    embedding: torch.Tensor
    attention: torch.Tensor
    attn_out: torch.Tensor
    ffn_out: torch.Tensor
    logits: torch.Tensor


@torch.no_grad()
def trace_token_flow(model: GPT, ids: torch.Tensor) -> FlowRecord:
    """Run ``model`` on ``ids: (T,)`` or ``(1, T)`` and record each stage (see ``FlowRecord``).

    One ordinary ``model(ids, need_weights=True)`` in eval mode (restored after, even on an error): forward hooks
    read the first block's input and what each block's attention and feed-forward return, and each block keeps
    its attention weights, so the record is what the model computes, not a copy of its block loop.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a transformer_lib GPT, got {type(model).__name__}")
    if model.cfg.positional == "alibi":
        raise ValueError("model.cfg.positional='alibi' is not supported: its bias is not one of the traced stages")
    if not isinstance(ids, torch.Tensor) or ids.dim() not in (1, 2) or (ids.dim() == 2 and ids.shape[0] != 1):
        raise ValueError(f"ids must be a tensor (T,) or (1, T), got {getattr(ids, 'shape', type(ids).__name__)}")
    ids = ids.reshape(1, -1).to(next(model.parameters()).device)  # (1, T)
    if not 1 <= ids.shape[1] <= model.cfg.block_size:
        raise ValueError(f"ids must hold 1..block_size={model.cfg.block_size} tokens, got T={ids.shape[1]}")
    seen = {"embedding": [], "attention": [], "feed-forward": []}
    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, args: seen["embedding"].append(args[0][0]))]
    for block in model.blocks:
        hooks.append(block.self_attn.register_forward_hook(lambda m, a, out: seen["attention"].append(out[0][0])))
        hooks.append(block.ffn.register_forward_hook(lambda m, a, out: seen["feed-forward"].append(out[0])))
    try:
        with eval_mode(model):
            logits = model(ids, need_weights=True)[0][0]  # (T, V)
    finally:
        for hook in hooks:
            hook.remove()
    weights = [block.self_weights[0] for block in model.blocks]  # L of (H, T, T)
    cpu = lambda t: t.detach().float().cpu()  # noqa: E731
    return FlowRecord(
        ids[0].tolist(),
        cpu(seen["embedding"][0]),
        cpu(torch.stack(weights)),
        cpu(torch.stack(seen["attention"])),
        cpu(torch.stack(seen["feed-forward"])),
        cpu(logits),
    )


def _tensor(name: str, value, shape: tuple) -> torch.Tensor:
    """``value`` checked to be a finite tensor of ``shape`` (``None`` entries match any size >= 1), as float32 on
    the CPU."""
    return check_tensor(name, value, shape, finite=True).detach().float().cpu()


class TokenFlow(LiveWidget):
    """One token's way through a GPT, recomputed in the browser from the numbers of one real forward pass.

    The reader picks a ``position`` (its token), a ``layer``, a ``head`` and a ``stage`` (one of ``STAGES``).
    Python sends, per position: the token id and text, the embedding's norm and first ``n_dims`` entries, every
    layer's and head's attention row, the norms of what attention and the feed-forward add, and the ``top_k``
    largest logits with ``logsumexp`` of the whole row (the browser turns them into probabilities).
    """

    script = "token_flow.js"
    tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    ids = traitlets.List(traitlets.Int()).tag(sync=True)
    n_layers = traitlets.Int().tag(sync=True)
    n_heads = traitlets.Int().tag(sync=True)
    d_model = traitlets.Int().tag(sync=True)
    n_dims = traitlets.Int().tag(sync=True)
    top_k = traitlets.Int().tag(sync=True)
    emb_norm = traitlets.Unicode().tag(sync=True)  # base64 float32 (T,)
    emb_dims = traitlets.Unicode().tag(sync=True)  # (T, n_dims)
    attention = traitlets.Unicode().tag(sync=True)  # (L, H, T, T)
    attn_norm = traitlets.Unicode().tag(sync=True)  # (L, T)
    ffn_norm = traitlets.Unicode().tag(sync=True)  # (L, T)
    top_ids = traitlets.List(traitlets.List(traitlets.Int())).tag(sync=True)  # (T, top_k)
    top_tokens = traitlets.List(traitlets.List(traitlets.Unicode())).tag(sync=True)
    top_logits = traitlets.Unicode().tag(sync=True)  # (T, top_k)
    logsumexp = traitlets.Unicode().tag(sync=True)  # (T,)
    position = traitlets.Int(0).tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(0).tag(sync=True)
    stage = traitlets.Unicode("attention").tag(sync=True)

    picture = "token_flow"  # live_static.token_flow: the static picture

    def __init__(
        self,
        tokens: Sequence[str],
        record: FlowRecord,
        vocab: Sequence[str],
        top_k: int = 5,
        n_dims: int = 8,
        position: int | None = None,
        layer: int = 0,
        head: int = 0,
        stage: str = "attention",
    ):
        if isinstance(tokens, str) or len(tokens) == 0 or not all(isinstance(t, str) for t in tokens):
            raise ValueError(f"tokens must be a non-empty list of strings (one per position), got {tokens!r}")
        if not isinstance(record, FlowRecord):
            raise TypeError(f"record must be a FlowRecord (see trace_token_flow), got {type(record).__name__}")
        T = len(tokens)
        if len(record.ids) != T:
            raise ValueError(f"record.ids has {len(record.ids)} positions, tokens has {T}")
        emb = _tensor("record.embedding", record.embedding, (T, None))
        att = _tensor("record.attention", record.attention, (None, None, T, T))
        L, H, D = att.shape[0], att.shape[1], emb.shape[1]
        a_out = _tensor("record.attn_out", record.attn_out, (L, T, D))
        f_out = _tensor("record.ffn_out", record.ffn_out, (L, T, D))
        logits = _tensor("record.logits", record.logits, (T, None))
        if isinstance(vocab, str) or len(vocab) != logits.shape[1]:
            raise ValueError(f"vocab must list one string per logit ({logits.shape[1]}), got {len(vocab)} entries")
        check_range("top_k", top_k, 1, min(20, logits.shape[1]))
        check_range("n_dims", n_dims, 1, min(32, D))
        check_range("position", T - 1 if position is None else position, 0, T - 1)
        check_range("layer", layer, 0, L - 1)
        check_range("head", head, 0, H - 1)
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        top = logits.topk(top_k, dim=-1)  # values, indices: (T, top_k)
        super().__init__(
            tokens=list(tokens),
            ids=[int(i) for i in record.ids],
            n_layers=L,
            n_heads=H,
            d_model=D,
            n_dims=n_dims,
            top_k=top_k,
            emb_norm=encode_float32(emb.norm(dim=-1)),
            emb_dims=encode_float32(emb[:, :n_dims]),
            attention=encode_float32(att),
            attn_norm=encode_float32(a_out.norm(dim=-1)),
            ffn_norm=encode_float32(f_out.norm(dim=-1)),
            top_ids=top.indices.tolist(),
            top_tokens=[[str(vocab[i]) for i in row] for row in top.indices.tolist()],
            top_logits=encode_float32(top.values),
            logsumexp=encode_float32(logits.logsumexp(dim=-1)),
            position=T - 1 if position is None else position,
            layer=layer,
            head=head,
            stage=stage,
        )

    @classmethod
    def from_model(cls, model: GPT, tokenizer, prompt: str, **kwargs) -> "TokenFlow":
        """Trace ``model`` on ``tokenizer.encode(prompt)`` (``kwargs`` as for the constructor)."""
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
        ids = torch.tensor(tokenizer.encode(prompt))
        record = trace_token_flow(model, ids)
        vocab = [tokenizer.decode([i]) for i in range(model.cfg.vocab_size)]
        return cls([vocab[i] for i in record.ids], record, vocab, **kwargs)

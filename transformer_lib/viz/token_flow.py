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

from ..utils.checks import check_choice, check_int, check_sequence, check_tensor, check_type
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
    check_type("model", model, GPT, expected="a transformer_lib GPT")
    if model.cfg.positional == "alibi":
        raise ValueError("model.cfg.positional='alibi' is not supported: its bias is not one of the traced stages")
    shape = (1, "T") if getattr(ids, "ndim", None) == 2 else ("T",)
    check_tensor("ids", ids, shape, note="(T,) or (1, T): one sequence")
    check_int("ids.shape[-1]", ids.shape[-1], max=model.cfg.block_size, note="T: at most model.cfg.block_size tokens")
    ids = ids.reshape(1, -1).to(next(model.parameters()).device)  # (1, T)
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
        check_sequence("tokens", tokens, min_len=1, items=str, note="one string per position")
        check_type("record", record, FlowRecord, expected="a FlowRecord (see trace_token_flow)")
        T = len(tokens)
        check_sequence("record.ids", record.ids, length=T, note="one id per token of tokens")
        emb = _tensor("record.embedding", record.embedding, (T, None))
        att = _tensor("record.attention", record.attention, (None, None, T, T))
        L, H, D = att.shape[0], att.shape[1], emb.shape[1]
        a_out = _tensor("record.attn_out", record.attn_out, (L, T, D))
        f_out = _tensor("record.ffn_out", record.ffn_out, (L, T, D))
        logits = _tensor("record.logits", record.logits, (T, None))
        check_sequence("vocab", vocab, length=logits.shape[1], note="one string per logit")
        check_range("top_k", top_k, 1, min(20, logits.shape[1]))
        check_range("n_dims", n_dims, 1, min(32, D))
        check_range("position", T - 1 if position is None else position, 0, T - 1)
        check_range("layer", layer, 0, L - 1)
        check_range("head", head, 0, H - 1)
        check_choice("stage", stage, STAGES)
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
        check_int("len(prompt)", len(check_type("prompt", prompt, str)), min=1, note="a prompt of one token at least")
        ids = torch.tensor(tokenizer.encode(prompt))
        record = trace_token_flow(model, ids)
        vocab = [tokenizer.decode([i]) for i in range(model.cfg.vocab_size)]
        return cls([vocab[i] for i in record.ids], record, vocab, **kwargs)

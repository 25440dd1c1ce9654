"""Pruning: remove the parts of a trained Transformer it does not need.

Used in chapter 08.

* **Head masks** (``head_mask``): a gate ``xi[l, h]`` multiplies head ``h``'s slice of the input to ``W_O`` in
  layer ``l``; 1 keeps the head, 0 silences it. Masking changes the function, not the work done.
* **Head importance** (Michel et al. 2019, "Are Sixteen Heads Really Better than One?", section 4.1):
  ``I[l, h] = mean over sequences x of |dL(x) / d xi[l, h]|`` at ``xi = 1``: how much the loss reacts to the gate.
  A simpler baseline is the size of a head's weights (``magnitude_importance``).
* **Structural pruning**: ``prune_heads`` builds smaller attention modules (fewer rows in ``qkv``, fewer columns in
  ``out``: ``attention_with_heads``, whose ``n_heads * d_head`` is then below ``d_model``) and ``drop_layers``
  removes whole blocks, so the model does less work.
* **Unstructured pruning** (``magnitude_prune``): zero the smallest weights with ``torch.nn.utils.prune``;
  the matrices keep their shapes, so dense kernels do the same work.

All functions that prune return a pruned *copy*; the model passed in is left unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from functools import partial
from typing import Callable, Iterable, Mapping, Sequence

import torch
import torch.nn as nn
from torch.nn.utils import prune

from ..blocks.multihead import MultiHeadAttention
from ..serving.weight_layout import unpack_weights
from ..utils.checks import check_equal, check_int, check_number, check_sequence, check_tensor, check_type
from ..utils.device import to_device
from ..training.losses import gpt_loss
from ..utils.modes import eval_mode
from ..utils.params import count_parameters as count_parameters  # P.count_parameters: the library's one counter


# ----------------------------------------------------------------------------- the model's heads
def _stack(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """``("blocks", model.blocks)`` for a ``GPT``, ``("layers", model.layers)`` for a ``BertEncoder``."""
    for name in ("blocks", "layers"):
        stack = getattr(model, name, None)
        if (
            isinstance(stack, nn.ModuleList)
            and len(stack) > 0
            and all(isinstance(getattr(b, "self_attn", None), MultiHeadAttention) for b in stack)
        ):
            return name, stack
    raise ValueError(
        f"model must have .blocks (a GPT) or .layers (a BertEncoder) whose items have a "
        f"MultiHeadAttention .self_attn, got {type(model).__name__}"
    )


def attention_modules(model: nn.Module) -> list[MultiHeadAttention]:
    """The self-attention module of each block: ``model.blocks[l].self_attn`` (``GPT``) or
    ``model.layers[l].self_attn`` (``BertEncoder``)."""
    return [b.self_attn for b in _stack(model)[1]]


def head_counts(model: nn.Module) -> list[int]:
    """Number of heads in each layer, e.g. ``[4, 4, 4, 4]`` (``[4, 2, 3, 4]`` after pruning)."""
    return [attn.n_heads for attn in attention_modules(model)]


def _check_mask(mask, counts: list[int]) -> list[torch.Tensor]:
    """``mask`` as one gate tensor per layer, each ``(n_heads_l,)`` or ``(B, n_heads_l)``."""
    per_layer = f"one per layer, head counts {counts}"
    check_type("mask", mask, (torch.Tensor, list, tuple), expected=f"a tensor or a list of tensors ({per_layer})")
    if isinstance(mask, torch.Tensor):  # its rows are the layers' gates
        check_int("mask.dim()", mask.dim(), min=2, max=3, note="(n_layers, n_heads) or (n_layers, B, n_heads)")
    rows = check_sequence("mask", list(mask), length=len(counts), note=per_layer)
    for layer, (row, n) in enumerate(zip(rows, counts)):
        check_tensor(f"mask[{layer}]", row, shape=(..., n), note=f"(n_heads,) or (B, n_heads); head counts {counts}")
        check_int(f"mask[{layer}].dim()", row.dim(), min=1, max=2, note="(n_heads,) or (B, n_heads)")
    return rows


@contextlib.contextmanager
def head_mask(model: nn.Module, mask):
    """Within the ``with`` block, multiply each head's output by its gate ``mask[l][h]`` before ``W_O``.

    ``mask``: ``(n_layers, n_heads)``, or one ``(n_heads_l,)`` tensor per layer; ``(n_layers, B, n_heads)`` gives
    every sequence of a batch its own gates. It may require grad (``head_importance`` differentiates through it).
    A forward pre-hook on each ``out`` Linear scales head ``h``'s slice ``h * d_head : (h + 1) * d_head`` of its
    input ``(B, T, H * d_head)``.
    """
    attns = attention_modules(model)
    rows = _check_mask(mask, [a.n_heads for a in attns])

    def make_hook(attn: MultiHeadAttention, gate: torch.Tensor):
        def hook(module, args):
            x = args[0]  # (B, T, H * d_head): the concatenated heads
            heads = x.unflatten(-1, (attn.n_heads, attn.d_head))  # (B, T, H, d_head)
            g = gate.to(x.dtype)[..., None, :, None]  # (1 or B, 1, H, 1)
            return ((heads * g).flatten(-2),) + tuple(args[1:])

        return hook

    handles = [a.out.register_forward_pre_hook(make_hook(a, g)) for a, g in zip(attns, rows)]
    try:
        yield model
    finally:
        for h in handles:
            h.remove()


def mask_from_heads(counts: Sequence[int], heads: Mapping[int, Sequence[int]]) -> torch.Tensor:
    """``(n_layers, n_heads)`` float mask: 0 at the ``heads`` to prune (``{layer: [head, ...]}``), 1 elsewhere."""
    _check_same_counts(list(counts), "for a (n_layers, n_heads) mask")
    _check_heads(list(counts), heads, allow_empty_layer=True)
    mask = torch.ones(len(counts), counts[0])
    for layer, hs in heads.items():
        mask[layer, list(hs)] = 0.0
    return mask


# ----------------------------------------------------------------------------- importance scores
def head_importance(
    model: nn.Module, batches: Iterable, loss_fn: Callable = gpt_loss, normalize: bool = False
) -> torch.Tensor:
    """Michel et al. 2019: ``I[l, h] = mean over sequences x of |dL(x) / d xi[l, h]|`` at ``xi = 1``.

    Returns ``(n_layers, n_heads)``. ``batches``: e.g. ``(x: (B, T), y: (B, T))`` pairs for
    ``loss_fn(model, batch) -> scalar``, which must be the *mean* of the B sequences' losses with equal weights
    (true for ``gpt_loss`` when no target is ignored). Each sequence gets its own gates, so one backward pass
    per batch gives every sequence's gradient: ``dL(x_b) / d xi[l, b, h] = B * d loss / d xi[l, b, h]``.
    The absolute value is taken per sequence, before averaging: a trained model's *mean* gradient is near 0.
    ``normalize``: divide each layer's scores by their L2 norm, as the paper does. Parameters get no
    gradient; the model runs in eval mode (no dropout), so the scores are deterministic.
    """
    counts = head_counts(model)
    _check_same_counts(counts, "for head_importance's (n_layers, n_heads) scores")
    p = next(model.parameters())
    scores, n = torch.zeros(len(counts), counts[0], device=p.device), 0
    with eval_mode(model):
        for batch in batches:
            batch = to_device(batch, p.device)
            B = batch[0].shape[0]
            xi = torch.ones(len(counts), B, counts[0], device=p.device, requires_grad=True)  # (L, B, H)
            with torch.enable_grad(), head_mask(model, xi):
                (grad,) = torch.autograd.grad(loss_fn(model, batch), xi)  # (L, B, H); parameters untouched
            scores += (grad * B).abs().sum(dim=1)
            n += B
    check_int("the sequences in batches", n, min=1, note="at least one batch")
    scores = scores / n
    if normalize:
        scores = scores / scores.norm(dim=-1, keepdim=True).clamp_min(1e-20)
    return scores.detach().cpu()


@torch.no_grad()
def head_weight_norms(attn: MultiHeadAttention) -> torch.Tensor:
    """``(n_heads,)``: the L2 norm of each head's own weights: its rows of ``W_Q``, ``W_K``, ``W_V``
    (``(d_head, d_model)`` each) and its columns of ``W_O`` (``(d_model, d_head)``)."""
    H, D = attn.n_heads, attn.d_head
    check_equal("attn.n_kv_heads", getattr(attn, "n_kv_heads", H), H, note="n_heads: no grouped-query attention")
    w_qkv = attn.qkv.weight.float().view(3, H, D, -1)  # (3 = q/k/v, H, d_head, d_model)
    w_o = attn.out.weight.float().view(attn.d_model, H, D)  # (d_model, H, d_head)
    return (w_qkv.pow(2).sum(dim=(0, 2, 3)) + w_o.pow(2).sum(dim=(0, 2))).sqrt().cpu()


def magnitude_importance(model: nn.Module) -> torch.Tensor:
    """Baseline score ``(n_layers, n_heads)``: ``head_weight_norms`` of every layer (big weights = important)."""
    return torch.stack([head_weight_norms(a) for a in attention_modules(model)])


def random_importance(model: nn.Module, seed: int = 0) -> torch.Tensor:
    """Control: ``(n_layers, n_heads)`` uniform random scores (a random pruning order)."""
    counts = head_counts(model)
    return torch.rand(len(counts), max(counts), generator=torch.Generator().manual_seed(seed))


def heads_to_prune(scores: torch.Tensor, n: int, per_layer: bool = False) -> dict[int, list[int]]:
    """The lowest-scoring heads as ``{layer: [head, ...]}``, never a layer's last head.

    ``scores: (n_layers, n_heads)``. ``per_layer=False``: the ``n`` lowest over the whole model (at most
    ``n_layers * (n_heads - 1)``: one head stays per layer); ``per_layer=True``: the ``n`` lowest of *each*
    layer (``n < n_heads``). Ties go to the lower (layer, head) index.
    """
    L, H = check_tensor("scores", scores, shape=(None, None), note="n_layers, n_heads").shape
    if per_layer:
        check_int("n", n, min=0, max=H - 1, note=f"per layer: one of its {H} heads stays")
        order = torch.argsort(scores, dim=-1, stable=True)[:, :n]  # (L, n)
        return {layer: sorted(order[layer].tolist()) for layer in range(L) if n > 0}
    check_int("n", n, min=0, max=L * (H - 1), note=f"one head stays in each of the {L} layers")
    plan, left, taken = {}, [H] * L, 0
    for i in torch.argsort(scores.flatten(), stable=True).tolist():
        if taken == n:
            break
        layer, head = divmod(i, H)
        if left[layer] > 1:
            plan.setdefault(layer, []).append(head)
            left[layer] -= 1
            taken += 1
    return {layer: sorted(hs) for layer, hs in sorted(plan.items())}


# ----------------------------------------------------------------------------- structural pruning
def _check_same_counts(counts: list[int], why: str) -> None:
    """The same head count in every layer (an unpruned model)."""
    check_equal("head counts", counts, counts[:1] * len(counts), note=f"the same in every layer, {why}")


def _check_heads(counts: list[int], heads: Mapping[int, Sequence[int]], allow_empty_layer: bool = False) -> None:
    """``heads``: ``{layer: [head, ...]}`` of distinct, existing heads; with ``allow_empty_layer=False`` (pruning)
    never every head of a layer."""
    check_type("heads", heads, Mapping, expected="a dict {layer: [head, ...]}")
    for layer, hs in heads.items():
        check_int("heads' layer index", layer, min=0, max=len(counts) - 1, note=f"{len(counts)} layers")
        heads_of = partial(check_int, min=0, max=counts[layer] - 1, note=f"layer {layer}'s heads")
        hs = check_sequence(f"heads[{layer}]", list(hs), items=heads_of, unique=True)
        if not allow_empty_layer:  # a layer with no heads left: drop_layers removes it instead
            note = f"one of layer {layer}'s {counts[layer]} heads stays; drop the whole layer with drop_layers"
            check_int(f"len(heads[{layer}])", len(hs), max=counts[layer] - 1, note=note)


def attention_with_heads(attn: MultiHeadAttention, n_heads: int, d_head: int | None = None) -> MultiHeadAttention:
    """A copy of ``attn`` (its class, RoPE, cache index, window, dropout, mode, device and dtype) with ``n_heads``
    heads of ``d_head`` features (default ``attn.d_head``) and fresh weights: ``qkv: (3 n_heads d_head, d_model)``,
    ``out: (d_model, n_heads d_head)``. After pruning ``n_heads * d_head`` is below ``d_model``."""
    d_head = attn.d_head if d_head is None else d_head
    new = copy.deepcopy(attn)
    new.n_heads, new.d_head, bias = n_heads, d_head, attn.qkv.bias is not None
    new.qkv = nn.Linear(attn.d_model, 3 * n_heads * d_head, bias=bias)  # [W_Q; W_K; W_V] of the heads kept
    new.out = nn.Linear(n_heads * d_head, attn.d_model, bias=bias)  # W_O
    return new.to(device=attn.qkv.weight.device, dtype=attn.qkv.weight.dtype)


@torch.no_grad()
def prune_attention_heads(attn: MultiHeadAttention, keep: Sequence[int]) -> MultiHeadAttention:
    """A new, smaller attention module (``attention_with_heads``) holding only the heads ``keep`` (in that order).

    ``qkv`` keeps rows ``h * d_head : (h + 1) * d_head`` of each of its ``W_Q``, ``W_K``, ``W_V`` blocks;
    ``out`` keeps the same columns of ``W_O`` (and its whole bias, which belongs to no head).
    """
    H, D = attn.n_heads, attn.d_head
    check_equal("attn.n_kv_heads", getattr(attn, "n_kv_heads", H), H, note="n_heads: no grouped-query attention")
    keep = check_sequence("keep", list(keep), min_len=1, items=partial(check_int, min=0, max=H - 1), unique=True)
    cols = torch.cat([torch.arange(h * D, (h + 1) * D) for h in keep])  # features of the kept heads
    rows = torch.cat([cols + block * H * D for block in range(3)])  # the same features in W_Q, W_K, W_V
    device = attn.qkv.weight.device
    new = attention_with_heads(attn, len(keep))
    new.qkv.weight.copy_(attn.qkv.weight[rows.to(device)])  # (3 * kept * d_head, d_model)
    new.out.weight.copy_(attn.out.weight[:, cols.to(device)])  # (d_model, kept * d_head)
    if attn.qkv.bias is not None:
        new.qkv.bias.copy_(attn.qkv.bias[rows.to(device)])
        new.out.bias.copy_(attn.out.bias)
    return new.train(attn.training)


def prune_heads(model: nn.Module, heads: Mapping[int, Sequence[int]]) -> nn.Module:
    """A copy of ``model`` (a ``GPT`` or ``BertEncoder``) with the ``heads`` ``{layer: [head, ...]}`` removed.

    Head indices refer to ``model``'s current heads. Raises ``ValueError`` for a bad index or for all
    heads of a layer. The copy computes exactly what ``model`` computes under ``head_mask`` with those
    heads at 0. Layers may now differ in head count; ``StaticCache.for_model`` sizes each layer's own.
    """
    counts = head_counts(model)
    _check_heads(counts, heads)
    if getattr(getattr(model, "cfg", None), "positional", None) == "alibi":
        raise ValueError("cannot prune heads of an ALiBi model: its per-head slopes come from cfg.n_heads")
    pruned = copy.deepcopy(model)
    stack = _stack(pruned)[1]
    for layer, hs in heads.items():
        if hs:
            block = stack[layer]
            block.self_attn = prune_attention_heads(
                block.self_attn, [h for h in range(counts[layer]) if h not in set(hs)]
            )
    return pruned


def drop_layers(model: nn.Module, layers: Sequence[int]) -> nn.Module:
    """A copy of ``model`` (a ``GPT`` or ``BertEncoder``) without the blocks ``layers``; the others keep their order.

    Each remaining block's ``layer_idx`` is renumbered ``0 .. n - 1`` (the KV cache indexes by it) and
    ``cfg.n_layers`` is updated.
    """
    n = len(attention_modules(model))
    layers = check_sequence("layers", list(layers), items=partial(check_int, min=0, max=n - 1), unique=True)
    check_int("len(layers)", len(layers), max=n - 1, note=f"cannot drop all {n} layers: one stays")
    pruned = copy.deepcopy(model)
    name, stack = _stack(pruned)
    stack = nn.ModuleList(b for i, b in enumerate(stack) if i not in set(layers))
    setattr(pruned, name, stack)
    for i, block in enumerate(stack):
        block.self_attn.layer_idx = i
    if dataclasses.is_dataclass(getattr(pruned, "cfg", None)) and hasattr(pruned.cfg, "n_layers"):
        pruned.cfg = dataclasses.replace(pruned.cfg, n_layers=len(stack))
    return pruned


# ----------------------------------------------------------------------------- unstructured pruning
def prunable_weights(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """``(module, "weight")`` of every Linear inside the blocks (``qkv``, ``out``, FFN ``up``/``down``).

    The embedding (tied to the output layer) and the LayerNorms are left dense."""
    return [(m, "weight") for block in _stack(model)[1] for m in block.modules() if isinstance(m, nn.Linear)]


def magnitude_prune(model: nn.Module, amount: float, permanent: bool = True) -> nn.Module:
    """A copy of ``model`` with the fraction ``amount`` of its smallest block weights set to 0.

    One global threshold over all ``prunable_weights`` (``prune.global_unstructured`` with L1 magnitude).
    ``permanent=False`` keeps PyTorch's mask: each forward recomputes ``weight = weight_orig * weight_mask``.
    """
    check_number("amount", amount, 0, 1, note="the fraction of block weights to zero")
    pruned = copy.deepcopy(model)
    unpack_weights(pruned)  # torch's prune flattens each weight with .view: nn.Linear's contiguous layout
    params = prunable_weights(pruned)
    prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=float(amount))
    if permanent:
        for module, name in params:
            prune.remove(module, name)  # bake the zeros into .weight, drop mask and hook
    return pruned


@torch.no_grad()
def sparsity(model: nn.Module) -> float:
    """Fraction of exact zeros in the ``prunable_weights``."""
    ws = [getattr(m, name) for m, name in prunable_weights(model)]
    return sum(int((w == 0).sum()) for w in ws) / sum(w.numel() for w in ws)

"""Measuring a model for quantization: its loss, perplexity and top-1 agreement on fixed batches (``lm_quality``)
and the calibration inputs of its linear layers (``capture_linear_inputs``), which GPTQ, AWQ and SmoothQuant read
(``replace_linears_calibrated`` swaps each layer for its calibrated version).

Used in chapter 09.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_empty, check_int, check_sequence, check_tensor
from ..utils.modes import eval_mode
from .linear import QuantEmbedding, linears_to_replace, set_module


# ----------------------------------------------------------------------------- measuring
@torch.no_grad()
def lm_quality(model: nn.Module, batches, reference_top1: torch.Tensor | None = None) -> dict:
    """A language model's validation loss (nats per token), perplexity and top-1 next-token predictions on fixed
    ``batches`` of ``(x, y)``, each ``(B, T)``. ``reference_top1`` (the ``top1`` of the float model on the same
    batches) adds ``agreement``: the share of positions where both models predict the same next token."""
    device = next(model.parameters()).device
    total, count, top1 = 0.0, 0, []
    with eval_mode(model):
        for x, y in batches:
            logits, _ = model(x.to(device))  # (B, T, V)
            total += F.cross_entropy(
                logits.flatten(0, 1).float(), y.to(device).flatten(), ignore_index=-100, reduction="sum"
            ).item()
            count += int((y != -100).sum())
            top1.append(logits.argmax(-1).cpu())
    check_int("batches' targets (not -100)", count, min=1, note="at least one (x, y) batch to score")
    top1 = torch.stack(top1)  # (n_batches, B, T)
    check_tensor("reference_top1", reference_top1, shape=tuple(top1.shape), optional=True, note="n_batches, B, T")
    loss = total / count
    out = {"loss": loss, "perplexity": float(torch.tensor(loss).exp()), "top1": top1, "agreement": None}
    if reference_top1 is not None:
        out["agreement"] = (top1 == reference_top1).float().mean().item()
    return out


@torch.no_grad()
def capture_linear_inputs(model: nn.Module, run) -> dict[str, torch.Tensor]:
    """The input of every ``nn.Linear`` while ``run(model)`` executes: ``{name: (tokens, in_features)}``."""
    captured, hooks = {}, []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):

            def hook(module, inputs, output, name=name):
                captured.setdefault(name, []).append(inputs[0].detach().reshape(-1, inputs[0].shape[-1]).cpu())

            hooks.append(m.register_forward_hook(hook))
    try:
        run(model)
    finally:
        for h in hooks:
            h.remove()
    return {name: torch.cat(xs) for name, xs in captured.items()}


def calibration_inputs(model: nn.Module, batches) -> dict[str, torch.Tensor]:
    """``capture_linear_inputs`` over calibration ``batches``: a list of model inputs (e.g. token ids ``(B, T)``)
    or of ``(x, y)`` pairs, whose ``x`` is fed; run in eval mode on the model's device."""
    check_sequence(
        "batches", batches, min_len=1, note="input tensors or (x, y) pairs", items=(torch.Tensor, tuple, list)
    )
    device = next(model.parameters()).device

    def run(m):
        with eval_mode(m):
            for b in batches:
                m((b[0] if isinstance(b, (tuple, list)) else b).to(device))

    return capture_linear_inputs(model, run)


def replace_linears_calibrated(
    model: nn.Module, batches, convert, tied_convert=None, skip: tuple[str, ...] = (), group_size: int | None = None
) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (in place) by ``convert(linear, inputs)``, where ``inputs:
    (tokens, in_features)`` is what that layer saw while the float model ran the calibration ``batches``.

    A layer whose weight is tied to an embedding (GPT's ``lm_head``) becomes ``tied_convert(linear)`` when given
    (default: ``convert`` as for any layer) and the embedding reads its codes (``QuantEmbedding``). Names in
    ``skip`` stay float; ``group_size`` must divide every replaced layer's ``in_features``, and every layer converted
    with ``convert`` must have seen calibration inputs (both checked before any layer is replaced).
    """
    linears = linears_to_replace(model, skip, group_size)
    inputs = calibration_inputs(model, batches)
    embeddings = {id(m.weight): name for name, m in model.named_modules() if isinstance(m, nn.Embedding)}
    tied_apart = {name for name, lin in linears if tied_convert is not None and id(lin.weight) in embeddings}
    unseen = [name for name, _ in linears if name not in inputs and name not in tied_apart]  # checked before any swap
    check_empty("layers that saw no calibration input", unseen, note=f"skip them: skip={tuple(unseen)!r}")
    for name, lin in linears:
        tied = embeddings.get(id(lin.weight))
        new = tied_convert(lin) if name in tied_apart else convert(lin, inputs[name])
        set_module(model, name, new)
        if tied is not None:
            set_module(model, tied, QuantEmbedding(new))
    return model

"""Counting a model's parameters: the library's one counter.

Used in chapters 08 and 12.

``GPT.num_params()``, ``Llama.num_params()``, ``pruning.count_parameters``, LoRA's trainable count and the
``num_params`` the trained checkpoints record (``book_models``) all call ``count_parameters``, so a number the book
prints about a model's size means the same thing in every chapter: each parameter tensor once (a tied embedding
and output head count once), every entry, or with ``nonzero=True`` only the entries a pruned model still computes
with (``trainable=True``: only those with ``requires_grad``).
"""

from __future__ import annotations

import torch.nn as nn

from .checks import check_bool, check_equal, check_type


def count_parameters(model: nn.Module, nonzero: bool = False, trainable: bool = False) -> int:
    """Parameters of any ``model`` (tied weights once). ``nonzero=True`` counts only entries that are not 0, of the
    weights the model computes with: under a ``torch.nn.utils.prune`` mask, ``weight`` rather than ``weight_orig``.
    ``trainable=True`` counts only parameters with ``requires_grad`` (what LoRA trains; peft's
    ``get_nb_trainable_parameters()[0]``)."""
    check_type("model", model, nn.Module, expected="an nn.Module")
    check_bool("nonzero", nonzero)
    check_bool("trainable", trainable)
    if trainable:
        check_equal("nonzero", nonzero, False, note="with trainable=True: count one or the other, not both")
        return sum(p.numel() for p in model.parameters() if p.requires_grad)
    if not nonzero:
        return sum(p.numel() for p in model.parameters())
    seen, total = set(), 0
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if name.endswith("_orig") and hasattr(module, name[: -len("_orig")] + "_mask"):
                p = getattr(module, name[: -len("_orig")])  # the masked weight
            if id(p) not in seen:
                seen.add(id(p))
                total += int((p != 0).sum())
    return total

"""Weights stored for decoding: the same matrices, laid out in memory the way a one-token product reads them.

Used in chapter 07.

Decoding multiplies every weight matrix by one vector per sequence: a matrix-vector product that streams the whole
matrix from memory, so the order in which the bytes are read matters. ``nn.Linear`` keeps ``W`` as ``(out, in)``
in row-major order; on the x86-64 CPUs this book was measured on (MKL), ``x W^T`` ran faster with the same
numbers stored column-major, i.e. ``W^T`` as a contiguous ``(in, out)`` matrix: GPT-2's ``Conv1D`` layout
(``benchmarks/bench_kv_cache.py`` times both). ``pack_for_decoding`` moves each weight's storage to that order *in
place*: the parameter keeps its shape ``(out, in)``, its values and its identity; only its strides change
(``weight.stride() == (1, out)``), so ``nn.Linear``'s own forward (``F.linear``) reads the faster layout, and
hooks, patches and subclasses of the module still run. No second copy of the weights is kept, and a packed weight
is not packed again: ``generate`` calls it once per model, as serving engines repack weights at load time.

A packed weight is not contiguous, so code that flattens a weight with ``.view`` (``torch.nn.utils.
parameters_to_vector``, hence ``torch.nn.utils.prune.global_unstructured``) needs it back in row-major order first:
``unpack_weights(model)`` does that, in place (the library's ``compression.magnitude_prune`` calls it on its copy).

Only fp32 weights on a CPU are packed (bf16 ran faster in ``(out, in)`` order there, and a GPU's kernels pick
their own layouts); a weight that is a tensor subclass (a quantized one) or belongs to a module that is not an
``nn.Linear`` (``QuantLinear``, ``torch.ao`` quantized layers) is left as it is, and so is a weight created under
``torch.inference_mode`` (PyTorch does not let its storage be swapped).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..utils.checks import check_type


def is_packed(weight: torch.Tensor) -> bool:
    """Whether a 2-D ``(out, in)`` weight is stored column-major (its transpose ``(in, out)`` is contiguous)."""
    return weight.dim() == 2 and weight.t().is_contiguous() and not weight.is_contiguous()


def _packable(module: nn.Module) -> bool:
    w = getattr(module, "weight", None)
    return (
        isinstance(module, nn.Linear)
        and type(w) in (nn.Parameter, torch.Tensor)
        and w.dtype == torch.float32
        and w.device.type == "cpu"
        and min(w.shape) > 1
        and not w.is_inference()  # made under torch.inference_mode: its storage cannot be swapped
    )


def _store(model: nn.Module, packed: bool) -> int:
    """Give every packable ``nn.Linear`` weight of ``model`` the wanted layout, in place (as ordinary tensors, even
    under ``torch.inference_mode``); returns how many changed. A shared weight (tied embedding and head) once."""
    check_type("model", model, nn.Module)
    changed = 0
    with torch.inference_mode(False), torch.no_grad():
        for module in model.modules():
            if _packable(module) and is_packed(module.weight) != packed:
                w = module.weight.data  # (out, in)
                module.weight.data = w.t().contiguous().t() if packed else w.contiguous()
                changed += 1
    return changed


def pack_for_decoding(model: nn.Module) -> int:
    """Store every packable ``nn.Linear`` weight of ``model`` column-major, in place: shape ``(out, in)``, storage
    ``(in, out)``. Returns how many weights changed layout (0 when they all had it: a second call does nothing).
    Called under ``torch.inference_mode`` (as ``generate`` runs), the model can still be trained afterwards."""
    return _store(model, packed=True)


def unpack_weights(model: nn.Module) -> int:
    """Undo ``pack_for_decoding``: every packed ``nn.Linear`` weight row-major again (``nn.Linear``'s own layout,
    contiguous), in place; returns how many changed. ``generate`` packs them again at its next CPU call."""
    return _store(model, packed=False)

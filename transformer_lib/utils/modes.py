"""A module's mode (training or evaluation), switched for a block of code and always restored."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch.nn as nn


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``with eval_mode(model): ...`` runs the block with ``model`` in eval mode (no dropout), then gives every
    submodule back the mode it had before, even when the block raises."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    before = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in before:
            m.training = training

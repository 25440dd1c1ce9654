"""A module's mode (training or evaluation), switched for a block of code and always restored."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch.nn as nn

from .checks import check_type


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``with eval_mode(model): ...`` runs the block with ``model`` in eval mode (no dropout), then gives every
    submodule back the mode it had before, even when the block raises."""
    check_type("model", model, nn.Module, expected="an nn.Module")
    before = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in before:
            m.training = training

"""Where tensors live: CUDA when present, else CPU. Modules follow their inputs' device and dtype.

Used in chapters 00, 01, 02, 03, 04, 05, 06, 07, 08, 09 and 11.
"""

from __future__ import annotations

import torch


def default_device() -> torch.device:
    """``cuda`` if a GPU is visible, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed torch (CPU and CUDA) and return a CPU generator seeded the same way."""
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def to_device(batch, device):
    """Move a batch (a tuple/list of tensors, or an object with ``.to``) to ``device``."""
    if isinstance(batch, (tuple, list)):
        return type(batch)(b.to(device) for b in batch)
    return batch.to(device)

"""Peak memory of the tensors a computation creates, counted exactly on any device.

Used in chapter 10.

``PeakTensorBytes`` is a ``TorchDispatchMode``: it sees every tensor that an operation returns, adds its storage's
bytes when the storage first appears, and subtracts them when the last tensor on that storage is freed (a
``weakref`` finaliser). ``peak`` is the largest sum reached. It counts what operations hand back, not the scratch
space a fused kernel allocates and frees inside itself, nor the allocator's rounding: a lower bound of the
process's real peak, and exactly the quantity the T x T argument is about::

    with PeakTensorBytes() as mem:
        out = attention(q, k, v)
    mem.peak  # bytes
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakTensorBytes(TorchDispatchMode):
    """Live and peak bytes of the storages created inside the ``with`` block (inputs made before it count 0)."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._storages: dict[tuple, list[int]] = {}  # (data_ptr, device) -> [bytes, live tensors on it]

    def _release(self, key) -> None:
        entry = self._storages.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self._storages[key]
            self.live -= entry[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            if storage.nbytes() == 0:
                continue
            key = (storage.data_ptr(), str(t.device))
            if key in self._storages:
                self._storages[key][1] += 1  # a view, or an op that returns its input: no new bytes
            else:
                self._storages[key] = [storage.nbytes(), 1]
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._release, key)
        return out


def peak_tensor_bytes(fn) -> int:
    """Peak bytes of the tensors created while ``fn()`` runs (``PeakTensorBytes``); the result is discarded."""
    with PeakTensorBytes() as mem:
        fn()
    return mem.peak

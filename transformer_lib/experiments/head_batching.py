"""All heads in one batched call against a loop over heads (chapter 03): latency and peak memory.

Used in chapter 03.

Both compute the same attention of ``H`` heads on the same ``q, k, v: (B, H, T, D)``. ``batched_heads``
makes one ``F.scaled_dot_product_attention`` call; ``looped_heads`` makes one call per head and concatenates.
``peak_memory_bytes`` measures the most memory the tensors created by a call occupy at once:
on CUDA from the allocator's own counter (``torch.cuda.max_memory_allocated``), on a CPU by following every
tensor that a PyTorch operation returns (a ``TorchDispatchMode``) until it is freed. The CPU count sees the
tensors operations return, not the scratch space a fused kernel uses inside itself.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ..book_tools.timing import interleaved_times, ratio_from_times


def batched_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Every head in one call: ``(B, H, Tq, D) x3 -> (B, H, Tq, D)``."""
    return F.scaled_dot_product_attention(q, k, v)


def looped_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One head at a time, then concatenated: the same result as ``batched_heads``."""
    return torch.cat(
        [F.scaled_dot_product_attention(q[:, i : i + 1], k[:, i : i + 1], v[:, i : i + 1]) for i in range(q.shape[1])],
        dim=1,
    )  # H tensors of (B, 1, Tq, D) -> (B, H, Tq, D)


class _LiveBytes(TorchDispatchMode):
    """Counts the bytes of storages created by operations while they are alive; keeps the maximum."""

    def __init__(self):
        super().__init__()
        self.refs, self.sizes, self.live, self.peak = {}, {}, 0, 0

    def _release(self, key):
        self.refs[key] -= 1
        if self.refs[key] == 0:
            self.live -= self.sizes.pop(key)
            del self.refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        outside = {a.untyped_storage().data_ptr() for a in flat} - set(self.refs)  # made before: not counted
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                key = t.untyped_storage().data_ptr()
                if key in outside:  # a view of a tensor made before fn ran
                    continue
                if key not in self.refs:  # a new storage (a view of an existing one adds nothing)
                    self.refs[key], self.sizes[key] = 0, t.untyped_storage().nbytes()
                    self.live += self.sizes[key]
                    self.peak = max(self.peak, self.live)
                self.refs[key] += 1
                weakref.finalize(t, self._release, key)
        return out


def peak_memory_bytes(fn, device=None) -> int:
    """Peak bytes held at once by the tensors ``fn()`` creates (its inputs, made before, are not counted)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = fn()
        torch.cuda.synchronize(device)
        del out
        return torch.cuda.max_memory_allocated(device) - base
    tracker = _LiveBytes()
    with tracker:
        out = fn()
    del out
    return tracker.peak


def compare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, repeats: int = 9) -> dict:
    """Latency (``repeats`` interleaved rounds, ``timing.interleaved_times``) and peak memory of the loop and the
    batched call.

    Returns ``{"times": {"batched": [s per round], "loop": [...]}, "ratio": timing.Ratio (loop / batched, round by
    round, with its interval), "memory": {"batched": bytes, "loop": bytes}, "max_abs_diff": float}``.
    """
    fns = {"batched": lambda: batched_heads(q, k, v), "loop": lambda: looped_heads(q, k, v)}
    with torch.inference_mode():
        diff = (batched_heads(q, k, v) - looped_heads(q, k, v)).abs().max().item()
        times = interleaved_times(fns, repeats=repeats, warmup=1, device=q.device)
        memory = {name: peak_memory_bytes(fn, q.device) for name, fn in fns.items()}
    return {
        "times": times,
        "ratio": ratio_from_times(times["loop"], times["batched"]),
        "memory": memory,
        "max_abs_diff": diff,
    }

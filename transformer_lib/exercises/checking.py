"""The one comparison every exercise uses."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class ExerciseResult:
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def _repr_markdown_(self) -> str:
        return ("**Correct.** " if self.passed else "**Not yet.** ") + self.message

    def __repr__(self) -> str:
        return ("Correct. " if self.passed else "Not yet. ") + self.message


def _describe(args: tuple) -> str:
    return ", ".join(f"{tuple(a.shape)} {str(a.dtype).replace('torch.', '')}" if isinstance(a, torch.Tensor)
                     else repr(a) for a in args)


def _compare(got, want, atol: float, rtol: float) -> str | None:
    if not isinstance(got, torch.Tensor):
        return f"returned a {type(got).__name__}, expected a torch.Tensor"
    if got.shape != want.shape:
        return f"returned shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if torch.isnan(got).any() and not torch.isnan(want).any():
        return "returned NaN values"
    if not torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol, equal_nan=True):
        diff = (got.double() - want.double()).abs()
        idx = tuple(int(i) for i in (diff == diff.max()).nonzero()[0])
        return f"largest difference {diff.max():.3g} at index {idx}: got {got[idx].item():.5g}, expected {want[idx].item():.5g}"
    return None


def check_against(reader_fn: Callable, reference_fn: Callable, make_inputs: Callable[[torch.Generator], tuple],
                  trials: int = 5, atol: float = 1e-5, rtol: float = 1e-4, seed: int = 0) -> ExerciseResult:
    """Run ``reader_fn(*inputs)`` and ``reference_fn(*inputs)`` on ``trials`` random input tuples.

    ``make_inputs(generator)`` returns a tuple of arguments. Tensor outputs are compared with
    ``torch.allclose(atol, rtol)``; the first mismatch is explained.
    """
    gen = torch.Generator().manual_seed(seed)
    for trial in range(trials):
        args = make_inputs(gen)
        want = reference_fn(*args)
        try:
            got = reader_fn(*args)
        except NotImplementedError as exc:
            return ExerciseResult(False, f"your function is not written yet (it raised NotImplementedError: {exc}).")
        except Exception as exc:  # the reader's code raised: show it, do not crash the notebook
            return ExerciseResult(False, f"your function raised {type(exc).__name__}: {exc} (inputs: {_describe(args)})")
        problem = _compare(got, want, atol, rtol)
        if problem:
            return ExerciseResult(False, f"on random case {trial + 1} (inputs: {_describe(args)}) your function {problem}.")
    return ExerciseResult(True, f"your function matches the library on {trials} random cases.")

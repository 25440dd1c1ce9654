"""The one comparison every exercise uses: ``check_against``, and ``random_int`` for drawing sizes.

``check_against(reader_fn, reference_fn, make_inputs, hints=...)`` behaves the same in every chapter:

* **Inputs.** ``make_inputs(generator)`` draws one case (a tuple of arguments); ``trials`` cases are drawn from a
  generator seeded with ``seed``, so a check gives the same verdict every time. The reader's function gets its own
  copies of the tensor arguments: changing them in place cannot change the reference's answer.
* **The reader's function raises.** The check does not raise: ``NotImplementedError`` (the exercise's stub) gives
  "not written yet"; any other exception gives "your function raised <Type>: <message>" with the inputs' shapes.
  No hint is searched (there is no output to compare).
* **Wrong output**, checked in this order on each case, the first problem explained:
  not a ``torch.Tensor``; a different shape; a different dtype (a float32 answer to an int8 exercise is wrong,
  and so is a float64 answer to a float32 one); NaN or inf where the reference is finite; values outside
  ``torch.allclose(atol, rtol)`` (the largest difference, where, and both values). Bool and integer answers are
  compared as numbers, so ``atol=rtol=0`` asks for equality. Where the reference returns a Python number (an
  int or float), the answer must be a number too (a one-element tensor counts), compared by value.
* **Hints.** ``hints`` maps a hint to a known wrong variant of the function. When the output is wrong, each
  variant is compared with the reader's function, by the same rules and tolerances, on 3 cases of
  ``hint_inputs`` (default ``make_inputs``); the first that agrees has its hint appended ("... Hint: ...").
  A variant that raises on those inputs is skipped. Order the hints from the most specific to the most general.
* **Errors of the check itself** (the reference or ``make_inputs`` raising) are not the reader's: they propagate.

It returns an ``ExerciseResult``: true when the reader's function agrees on every case; shown in a notebook as
"Correct. ..." or "Not yet. ..." followed by the explanation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

HINT_TRIALS = 3
"""How many cases a wrong variant must agree on for its hint to be given."""


@dataclass
class ExerciseResult:
    """A check's verdict: ``passed`` and a sentence for the reader. Truthy when passed."""

    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def _sentence(self) -> str:
        """The message as a sentence of its own: it follows "Correct." or "Not yet.", so a first English word gets
        its capital ("your function ..." -> "Your function ..."); a first name from code (``q.k``, ``d_k``, ``x``)
        keeps its case."""
        if re.match(r"[a-z]{2,}[ ,:]", self.message):
            return self.message[0].upper() + self.message[1:]
        return self.message

    def _repr_markdown_(self) -> str:
        return ("**Correct.** " if self.passed else "**Not yet.** ") + self._sentence()

    def __repr__(self) -> str:
        return ("Correct. " if self.passed else "Not yet. ") + self._sentence()


def random_int(gen: torch.Generator, low: int, high: int) -> int:
    """One int drawn uniformly from ``[low, high]`` (both included) with ``gen``."""
    return int(torch.randint(low, high + 1, (1,), generator=gen))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _describe(args: tuple) -> str:
    return ", ".join(
        f"{tuple(a.shape)} {_dtype_name(a.dtype)}"
        if isinstance(a, torch.Tensor)
        else type(a).__name__
        if isinstance(a, torch.nn.Module)
        else repr(a)
        for a in args
    )


def _copy(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _compare(got, want, atol: float, rtol: float) -> str | None:
    """``None`` if ``got`` matches ``want``, else what is wrong (completing "your function ...")."""
    if _is_number(want):  # a number is wanted: any number (or one-element tensor) is compared by value
        if isinstance(got, torch.Tensor) and got.numel() == 1 and not got.dtype == torch.bool:
            got = got.item()
        if not _is_number(got):
            return f"returned a {type(got).__name__}, expected a number"
        got, want = torch.tensor(float(got), dtype=torch.float64), torch.tensor(float(want), dtype=torch.float64)
    if not isinstance(got, torch.Tensor):
        return f"returned a {type(got).__name__}, expected a torch.Tensor"
    if got.shape != want.shape:
        return f"returned shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"returned dtype {_dtype_name(got.dtype)}, expected {_dtype_name(want.dtype)}"
    g, w = got.detach().cpu().double(), want.detach().cpu().double()
    bad = ~torch.isfinite(g) & torch.isfinite(w)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        return f"returned {g[idx].item()} at index {idx} where the expected value is {w[idx].item():.5g}"
    if not torch.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True):
        diff = torch.where(torch.isfinite(w), (g - w).abs(), (g != w).double() * float("inf"))
        diff = diff.nan_to_num(nan=0.0)
        idx = tuple(int(i) for i in (diff == diff.max()).nonzero()[0])
        return (
            f"has its largest difference {diff.max().item():.3g} at index {idx}: "
            f"got {g[idx].item():.5g}, expected {w[idx].item():.5g}"
        )
    return None


def _run(
    reader_fn: Callable, reference_fn: Callable, make_inputs: Callable, trials: int, atol: float, rtol: float, seed: int
) -> tuple[str | None, bool]:
    """Compare on ``trials`` cases: ``(problem, raised)``; ``problem`` is ``None`` when all agree."""
    gen = torch.Generator().manual_seed(seed)
    for trial in range(trials):
        args = make_inputs(gen)
        want = reference_fn(*args)
        try:
            got = reader_fn(*_copy(args))
        except NotImplementedError as exc:
            said = f": {exc}" if str(exc) else ""
            return f"your function is not written yet (it raised NotImplementedError{said}).", True
        except Exception as exc:  # the reader's code raised: explain it, do not crash the notebook
            return f"your function raised {type(exc).__name__}: {exc} (inputs: {_describe(args)}).", True
        problem = _compare(got, want, atol, rtol)
        if problem:
            return f"On random case {trial + 1} (inputs: {_describe(args)}) your function {problem}.", False
    return None, False


def _find_hint(
    reader_fn: Callable, hints: Mapping[str, Callable], make_inputs: Callable, atol: float, rtol: float, seed: int
) -> str | None:
    for hint, wrong in hints.items():
        try:
            problem, raised = _run(reader_fn, wrong, make_inputs, HINT_TRIALS, atol, rtol, seed)
        except Exception:  # the wrong variant cannot run on these inputs: no hint from it
            continue
        if problem is None:
            return hint
    return None


def check_against(
    reader_fn: Callable,
    reference_fn: Callable,
    make_inputs: Callable[[torch.Generator], tuple],
    *,
    hints: Mapping[str, Callable] | None = None,
    hint_inputs: Callable | None = None,
    trials: int = 5,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    seed: int = 0,
) -> ExerciseResult:
    """Compare ``reader_fn(*inputs)`` with ``reference_fn(*inputs)`` on ``trials`` random cases (see the module
    docstring for the whole behaviour: exceptions, shape, dtype, NaN, values, hints).

    ``make_inputs(generator) -> tuple`` draws one case; ``hints``: ``{hint: wrong_fn}``, tried in order when the
    reader's output is wrong, on ``hint_inputs`` (default ``make_inputs``).
    """
    problem, raised = _run(reader_fn, reference_fn, make_inputs, trials, atol, rtol, seed)
    if problem is None:
        return ExerciseResult(True, f"your function matches the library on {trials} random cases.")
    if hints and not raised:
        hint = _find_hint(reader_fn, hints, hint_inputs or make_inputs, atol, rtol, seed)
        if hint:
            problem = f"{problem} Hint: {hint}"
    return ExerciseResult(False, problem)

"""Sentences bound to measurements: a number in prose comes from the kernel, a comparison is checked.

Used in chapters 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10 and 11.

A chapter states a measured number through myst-nb's ``glue`` (``glue_number``: glued for the book *and*
returned, so the cell can print it for readers of the notebook, where glue roles do not render) and guards each
comparison in its prose with ``claim`` in a hidden cell (tag ``remove-cell``) right after the measurement::

    ratio = glue_number("cache_speedup", t_full / t_cached)   # markdown: {glue:text}`cache_speedup:.1f`
    claim(ratio > 1.3, "the cache decodes at least 1.3x faster")

When a retrained checkpoint or another machine makes the sentence false, the cell raises, so the book build
(``jupyter-book build -W``) and the notebook tests (``pytest --nbval-lax``) fail and print the sentence.
"""
from __future__ import annotations

import json
import numbers
import os

import numpy as np
import torch

PREFIX = "claim no longer holds: "


def _as_bool(condition, name: str = "condition") -> bool:
    """``condition`` as a Python bool; a ``TypeError`` for anything that is not a single truth value."""
    if isinstance(condition, (bool, np.bool_)):
        return bool(condition)
    if isinstance(condition, torch.Tensor) and condition.dtype == torch.bool and condition.dim() == 0:
        return bool(condition.item())
    if isinstance(condition, np.ndarray) and condition.dtype == np.bool_ and condition.ndim == 0:
        return bool(condition)
    got = (f"a {condition.dtype} tensor of shape {tuple(condition.shape)}" if isinstance(condition, torch.Tensor)
           else f"an array of dtype {condition.dtype} and shape {condition.shape}" if isinstance(condition, np.ndarray)
           else f"{type(condition).__name__} {condition!r}")
    raise TypeError(f"{name} must be a single truth value (bool, numpy bool or 0-dim bool tensor), got {got}; "
                    f"write the comparison out, e.g. claim(bool((x > 0).all()), ...)")


def claim(condition, sentence: str) -> None:
    """Check that the measurement still supports ``sentence`` (the prose it guards, quoted as printed).

    Raises ``AssertionError("claim no longer holds: <sentence>")`` when ``condition`` is false, and
    ``TypeError`` when it is not a single truth value (a tensor of many elements, a float, None, ...).
    """
    if not isinstance(sentence, str) or not sentence.strip():
        raise TypeError(f"sentence must be the non-empty sentence the claim guards, got {sentence!r}")
    holds = _as_bool(condition)
    _record(sentence, holds)
    if not holds:
        raise AssertionError(PREFIX + sentence)


def _record(sentence: str, holds: bool) -> None:
    """Append ``{"sentence", "holds"}`` as a JSON line to the file named by ``BOOK_CLAIMS_LOG``, when it is set: the
    perturbation tool reads every claim's verdict from it."""
    path = os.environ.get("BOOK_CLAIMS_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"sentence": sentence, "holds": holds}) + "\n")


def glue_number(name: str, value, fmt: str | None = None):
    """Glue ``value`` under ``name`` for the book's prose (``{glue:text}`name``` or ``name:.2f``) and return it.

    ``value`` is a real number (Python, numpy, or a one-element tensor, which is converted with ``.item()``).
    With ``fmt`` (e.g. ``".1f"``, ``","``) the *formatted string* is glued, so ``{glue:text}`name``` shows it
    as is; the number itself is returned either way, so the notebook can print it (Colab and Jupyter show the
    printed output, not the glue role).
    """
    from myst_nb import glue  # imported here: the library does not need myst-nb to run

    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be an identifier-like string (letters, digits, _), got {name!r}")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"value must be a single number, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"value must be a real number, got {type(value).__name__} {value!r}")
    if isinstance(value, np.generic):
        value = value.item()
    glue(name, format(value, fmt) if fmt is not None else value, display=False)
    return value


def glue_choice(name: str, key: str, words: dict[str, str]) -> str:
    """Glue the word that a measurement chose: ``words[key]`` under ``name``, and return ``key``.

    The prose writes ``{glue:text}`name``` where the word goes, so the sentence follows the measurement; ``key``
    (``"faster"``, ``"within_noise"``, ...) is what a translation maps to its own word.
    """
    if not isinstance(words, dict) or key not in words:
        raise KeyError(f"key {key!r} is not one of the words given for {name!r}: {sorted(words)}")
    from myst_nb import glue

    glue(name, words[key], display=False)
    return key


def claim_verdict(ratio, verdict: str, sentence: str) -> None:
    """Check a timing comparison against its interval: ``ratio.verdict()`` (a ``timing.Ratio``) must be
    ``verdict`` (``"faster"``, ``"slower"`` or ``"within_noise"``). The interval is quoted when it fails."""
    if verdict not in ("faster", "slower", "within_noise"):
        raise ValueError(f"verdict must be 'faster', 'slower' or 'within_noise', got {verdict!r}")
    claim(ratio.verdict() == verdict, f"{sentence} [measured {ratio}: {ratio.verdict()}]")

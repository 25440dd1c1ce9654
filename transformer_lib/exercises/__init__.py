"""Self-checking exercises: each chapter's checks live in ``chNN.py`` and use ``check_against``.

A check runs the reader's function and the library's reference on the same random inputs and
explains the first mismatch (wrong shape, wrong dtype, NaN, or the largest wrong value).
"""
from .checking import ExerciseResult, check_against

__all__ = ["ExerciseResult", "check_against"]

"""Self-checking exercises: each chapter's checks live in a module named for the chapter's slug
(``kv_cache.py``), and all use ``checking.check_against``.

A check runs the reader's function and the library's reference on the same random inputs and explains the
first mismatch (an exception, wrong type, shape or dtype, NaN, or the largest wrong value), then names a common
mistake if the reader's function matches one. ``checking``'s docstring states the whole behaviour.
"""

from .checking import ExerciseResult, check_against, random_int

__all__ = ["ExerciseResult", "check_against", "random_int"]

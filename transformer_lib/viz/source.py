"""Show the library's own source in a notebook, so the book and the library cannot drift apart.

Used in chapters 01, 02, 03, 04, 05, 06, 07, 08, 09, 10, 11 and 12.
"""
from __future__ import annotations

import inspect

from IPython.display import Code


def show_source(obj, lines: tuple[int, int] | None = None) -> Code:
    """Syntax-highlighted source of a function, class or method of the library.

    ``lines=(start, stop)`` keeps only that slice of the source's lines (0-based, stop excluded).
    """
    src = inspect.getsource(obj)
    if lines is not None:
        src = "\n".join(src.splitlines()[lines[0]: lines[1]])
    return Code(src, language="python")

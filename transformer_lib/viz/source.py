"""Show the library's own source in a notebook, so the book and the library cannot drift apart.

Used in chapters 01, 02, 03, 04, 05, 06, 07, 08, 09, 10, 11 and 12.
"""

from __future__ import annotations

import inspect
import textwrap

from IPython.display import Code


def source_part(obj, start: str | None = None, stop: str | None = None) -> str:
    """The source of ``obj`` (a function, class or method), or the part of it named by text, not line numbers.

    ``start``: the part begins at the first line containing this text; ``stop``: it ends before the first later
    line containing that text (without it: at the end of ``obj``). Naming the lines by what they say keeps the
    part right when code above it changes; text that is not (or no longer) there raises a ``ValueError``.
    """
    lines = inspect.getsource(obj).splitlines()
    name = getattr(obj, "__qualname__", repr(obj))
    first = 0
    if start is not None:
        first = next((i for i, line in enumerate(lines) if start in line), None)
        if first is None:
            raise ValueError(f"start={start!r} is on no line of {name}'s source")
    last = len(lines)
    if stop is not None:
        last = next((i for i in range(first + 1, len(lines)) if stop in lines[i]), None)
        if last is None:
            raise ValueError(f"stop={stop!r} is on no line of {name}'s source after start={start!r}")
    return textwrap.dedent("\n".join(lines[first:last])) if start is not None else "\n".join(lines[first:last])


def show_source(obj, start: str | None = None, stop: str | None = None) -> Code:
    """Syntax-highlighted source of a function, class or method of the library, or of the part of it from the line
    containing ``start`` to the line before the one containing ``stop`` (``source_part``)."""
    return Code(source_part(obj, start, stop), language="python")

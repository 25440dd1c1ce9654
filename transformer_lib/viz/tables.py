"""Tables for chapters: a list of row dicts as Markdown (shown with ``IPython.display.Markdown``).

Used in chapters 01, 02, 03, 04, 05, 06, 07, 08, 10 and 11.

``config_text`` wraps a printed dataclass config to the text column.
"""

from __future__ import annotations

import dataclasses
import textwrap


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A list of dicts as a Markdown table (for ``IPython.display.Markdown``)."""
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def config_text(config, width: int = 100) -> str:
    """A dataclass config as ``Name(field=value, ...)`` wrapped to ``width`` columns (a printed config fits the
    book's text column), continuation lines indented under the first field."""
    fields = ", ".join(f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config))
    head = f"{type(config).__name__}("
    return textwrap.fill(fields + ")", width=width, initial_indent=head, subsequent_indent=" " * len(head))

"""Tables for chapters: a list of row dicts as Markdown (shown with ``IPython.display.Markdown``).

Used in chapters 05, 06 and 07.
"""

from __future__ import annotations


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A list of dicts as a Markdown table (for ``IPython.display.Markdown``)."""
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)

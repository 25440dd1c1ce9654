"""Shared benchmark helpers: the library's interleaved timing (``transformer_lib.book_tools.timing``) and plain-text
tables."""

from __future__ import annotations

import logging

from transformer_lib.book_tools.timing import interleaved_medians, synchronize  # noqa: F401 (re-exported for the benchmarks)

# Importing torchao (ours, or transformers' optional import of it) logs a line per GPU kernel library it cannot load
# on a CPU-only machine, and makes torch log a deprecation note per enum it registers: noise, not results.
for _name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)


def table_lines(header: list[str], rows: list[list]) -> list[str]:
    """A right-aligned plain-text table: header, a rule, then one line per row."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    return [
        "  ".join(str(x).rjust(w) for x, w in zip(line, widths)) for line in [header, ["-" * w for w in widths], *rows]
    ]


def print_table(header: list[str], rows: list[list]) -> None:
    print("\n".join(table_lines(header, rows)))


def format_table(title: str, header: list[str], rows: list[list]) -> str:
    """The table under a ``## title`` line, as one string."""
    return "\n".join([f"## {title}", *table_lines(header, rows)])

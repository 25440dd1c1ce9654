"""Fix 5, on the page: a failed check shows where it failed (transformer_lib/book_tools/claims.py, ``BOOK_CLAIMS``).

128 of the book's 129 checks sit in cells tagged ``remove-cell``, which myst-nb drops, outputs and all, before the
notebook even runs. So every ``remove-cell`` code cell is kept as an empty slot (``notebook_to_tokens`` sees the tag
``SLOT_TAG`` instead, for that call only; the notebook that runs, is cached and written out keeps its tags), and the
slot renders nothing unless the cell left a failure: a failed claim's record (report mode: a display output of MIME
type ``FAILED_CLAIM_MIME``) becomes the box that quotes the sentence and its values; an error (strict mode's
``AssertionError``, or any other exception) becomes a box saying which hidden cell failed. A visible cell that failed
keeps myst-nb's traceback and gets an anchor. The banner above the page and the build's list of failures:
page_header.py.
"""

from __future__ import annotations

import html
import json
import re

from docutils import nodes

from .facts import claims_module

SLOT_TAG = "book-failure-slot"  # stands in for remove-cell while myst-nb makes tokens (never in a committed file)
REMOVE_TAGS = ("remove-cell", "remove_cell")
CELL_ANCHOR = "failed-cell"
CELL_MARK_CLASS = "book-failed-cell"
BOX_STYLE = (
    "border:2px solid #b3261e;border-left-width:8px;background:#fdecea;color:#3b0a07;"
    "padding:0.6em 1em;margin:0.8em 0;border-radius:4px"
)


def _tokens_with_slots(original):
    def notebook_to_tokens(notebook, *args, **kwargs):
        kept = []
        for cell in notebook.cells:
            tags = cell.get("metadata", {}).get("tags", [])
            if cell.get("cell_type") == "code" and any(t in REMOVE_TAGS for t in tags):
                kept.append((cell, tags))
                cell.metadata["tags"] = [t for t in tags if t not in REMOVE_TAGS] + [SLOT_TAG]
        try:
            return original(notebook, *args, **kwargs)
        finally:
            for cell, tags in kept:
                cell.metadata["tags"] = tags

    notebook_to_tokens.book_fixes = True
    return notebook_to_tokens


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def cell_mark(index: int, error: str) -> str:
    """The anchor left where a cell failed (page_header.py finds it and links the banner to it)."""
    return (
        f'<span id="{CELL_ANCHOR}" class="{CELL_MARK_CLASS}" data-cell="{index}" '
        f'data-error="{html.escape(error, quote=True)}"></span>'
    )


def _error_line(output) -> str:
    return f"{output.get('ename', 'Error')}: {strip_ansi(_text(output.get('evalue', '')))}"


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def failure_html(outputs, index: int, hidden: bool) -> list[str]:
    """HTML for the failures a cell left: its failed-claim records (report mode) and, for a hidden cell, its
    errors; an anchor for any error."""
    claims = claims_module()
    parts = []
    for out in outputs:
        kind = out.get("output_type")
        data = out.get("data", {}) if kind in ("display_data", "execute_result") else {}
        if hidden and claims.FAILED_CLAIM_MIME in data:
            record = data[claims.FAILED_CLAIM_MIME]
            record = json.loads(_text(record)) if not isinstance(record, dict) else record
            parts.append(claims.failure_html(record.get("sentence", "?"), record.get("values") or {}))
        elif kind == "error":
            parts.append(cell_mark(index, _error_line(out)))
            if not hidden:
                continue
            value = strip_ansi(_text(out.get("evalue", "")))
            if out.get("ename") == "AssertionError" and value.startswith(claims.PREFIX):
                parts.append(claims.failure_html(value[len(claims.PREFIX) :], {}, ran_on=False))
            else:
                parts.append(
                    f'<div class="book-hidden-cell-failed" role="note" style="{BOX_STYLE}"><p '
                    'style="margin:0"><strong>A hidden cell of this page failed here</strong> '
                    f"(<code>{html.escape(_error_line(out))}</code>); the build log has its traceback."
                    "</p></div>"
                )
    return parts


def _renders_failures(original):
    def render_nb_cell_code(self, token):
        index = token.meta["index"]
        tags = token.meta["metadata"].get("tags", [])
        hidden = SLOT_TAG in tags
        _, outputs = self.nb_client.code_cell_outputs(index)
        if "raises-exception" in tags:  # an error this cell is meant to show
            outputs = [out for out in outputs if out.get("output_type") != "error"]
        for part in failure_html(outputs, index, hidden):
            node = nodes.raw("", part, format="html")
            self.add_line_and_source_path(node, token)
            self.current_node.append(node)
        if not hidden:
            original(self, token)

    render_nb_cell_code.book_fixes = True
    return render_nb_cell_code


def patch_myst_nb() -> None:
    """Keep remove-cell code cells as slots, and render a cell's failures where it was (once per process)."""
    import myst_nb.sphinx_ as nb_sphinx
    from myst_nb.core.render import MditRenderMixin

    # Patches of myst-nb, not hooks: none of its public ones sees a removed cell.
    # - myst-nb drops a remove-cell cell in `notebook_to_tokens` (no token: nothing later sees the cell, its place
    #   or its outputs). No option keeps it (`nb_remove_code_source` and `nb_remove_code_outputs` apply to every
    #   cell and still render its container), and Sphinx's `source-read` would change the notebook that runs and is
    #   cached. So the reference `myst_nb.sphinx_` holds is wrapped: the tags change for that call only.
    if not getattr(nb_sphinx.notebook_to_tokens, "book_fixes", False):
        nb_sphinx.notebook_to_tokens = _tokens_with_slots(nb_sphinx.notebook_to_tokens)
    # - myst-nb renders a code cell in `MditRenderMixin.render_nb_cell_code`. Its extension point, the render plugin
    #   (`nb_render_plugin`: an `NbElementRenderer` registered under the `myst_nb.renderers` entry point, which needs
    #   an installed distribution), renders one output at a time by MIME type once myst-nb has built the cell: it
    #   can neither leave out a slot's source and container nor put the boxes before the cell; and by doctree-read
    #   myst-nb has turned each output into nodes of one MIME type (the claim's record is gone). So it is wrapped.
    if not getattr(MditRenderMixin.render_nb_cell_code, "book_fixes", False):
        MditRenderMixin.render_nb_cell_code = _renders_failures(MditRenderMixin.render_nb_cell_code)


def setup(app) -> None:
    patch_myst_nb()

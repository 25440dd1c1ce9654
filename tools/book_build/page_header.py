"""Fix 5, around the page, and the place of fix 6: under each notebook page's title, a banner for every failed claim
(linking to its box, failure_slots.py) and one for a failed cell ("everything after it is missing", linking to it),
and at its foot the provenance line (provenance.py); at the end of the build, the list of every failed claim
(chapter, sentence)
and failed notebook. In strict mode those lines are warnings (fatal under ``-W``), in report mode information. Any
exception other than a report-mode claim still fails ``make book`` in both modes: myst-nb's "Executing notebook
failed" is a warning.
"""

from __future__ import annotations

import html
import re

from docutils import nodes
from sphinx.util import logging

from .facts import BUILD, claims_mode, claims_module, is_notebook
from .failure_slots import BOX_STYLE, CELL_ANCHOR, CELL_MARK_CLASS, strip_ansi
from .provenance import provenance_html

LOGGER = logging.getLogger(__name__)

BANNER_CLASS = "book-failure-banner"


def _banner(claims: list[tuple[str, str]], cell: dict | None) -> str:
    parts = []
    if claims:
        items = "".join(
            f'<li><a href="#{anchor}">&ldquo;{html.escape(sentence)}&rdquo;</a></li>' for anchor, sentence in claims
        )
        parts.append(
            '<p style="margin:0"><strong>A measurement on this machine does not support '
            + ("one of this page's sentences" if len(claims) == 1 else f"{len(claims)} of this page's sentences")
            + f':</strong></p><ul style="margin:0.3em 0">{items}</ul>'
        )
    if cell:
        where = f'<a href="#{CELL_ANCHOR}">a cell</a>' if cell.get("anchor") else "a cell"
        parts.append(
            f'<p style="margin:0"><strong>This page is incomplete:</strong> its notebook stopped at '
            f"{where} that failed when the book was built (<code>{html.escape(cell['error'])}</code>); "
            "the outputs, figures and numbers after that cell are missing.</p>"
        )
    return f'<div class="{BANNER_CLASS}" role="alert" style="{BOX_STYLE}">{"".join(parts)}</div>'


def annotate_page(app, doctree) -> None:
    """Number the failure boxes of a notebook page, put the banner under its title and the provenance line at its
    foot, and note the failures for the end of the build."""
    env = app.env
    docname = env.docname
    if not is_notebook(env, docname):
        return
    box_class = claims_module().BOX_CLASS
    claims, cell = [], None
    for raw in list(doctree.findall(nodes.raw)):
        text = raw.astext()
        if box_class not in text and CELL_MARK_CLASS not in text:
            continue

        def number(match):
            anchor = f"failed-claim-{len(claims) + 1}"
            claims.append((anchor, html.unescape(match.group(1))))
            return f'id="{anchor}" {match.group(0)}'

        new = re.sub(rf'class="{box_class}" data-sentence="([^"]*)"', number, text)
        mark = re.search(rf'class="{CELL_MARK_CLASS}" data-cell="\d+" data-error="([^"]*)"', text)
        if mark and cell is None:
            cell = {"anchor": True, "error": html.unescape(mark.group(1))}
        if new != text:
            raw.replace(raw[0], nodes.Text(new))
    from myst_nb.sphinx_ import NbMetadataCollector

    exec_data = NbMetadataCollector.get_exec_data(env, docname)
    if exec_data and not exec_data.get("succeeded", True) and cell is None:
        lines = [line for line in strip_ansi(exec_data.get("traceback") or "").splitlines() if line.strip()]
        cell = {"anchor": False, "error": lines[-1].strip() if lines else str(exec_data.get("error"))}
    if cell is not None and exec_data and exec_data.get("succeeded", False):
        cell = None  # an error the notebook expected (a cell tagged raises-exception)
    if cell is not None and exec_data and exec_data.get("error") == "CellTimeoutError":
        # nbclient interrupts the kernel at the limit: the cell's own error is a bare KeyboardInterrupt
        limit = getattr(getattr(env, "mystnb_config", None), "execution_timeout", None)
        cell["error"] = "CellTimeoutError: the cell ran past the build's per-cell limit" + (
            f" of {limit} s" if limit else ""
        )
    section = next(iter(doctree.findall(nodes.section)), None)
    parent, at = (
        (section, 1) if section is not None and len(section) and isinstance(section[0], nodes.title) else (doctree, 0)
    )
    if claims or cell:  # the banner under the title; the provenance line at the page's foot, after the last cell
        parent.insert(at, nodes.raw("", _banner(claims, cell), format="html"))
    parent.append(nodes.raw("", provenance_html(exec_data, app.config.language), format="html"))
    failures = getattr(env, "book_failures", None)
    if failures is None:
        env.book_failures = failures = {}
    failures[docname] = {"claims": [sentence for _, sentence in claims], "cell": cell and cell["error"]}


def purge_failures(app, env, docname) -> None:
    getattr(env, "book_failures", {}).pop(docname, None)


def merge_failures(app, env, docnames, other) -> None:
    if not hasattr(env, "book_failures"):
        env.book_failures = {}
    env.book_failures.update({d: v for d, v in getattr(other, "book_failures", {}).items() if d in docnames})


def list_failures(app, exception) -> None:
    """The build's last lines: every failed claim (chapter, sentence) and every notebook that failed."""
    if exception is not None:
        return
    failures = getattr(app.env, "book_failures", {})
    lines = []
    for docname in sorted(failures):
        for sentence in failures[docname]["claims"]:
            lines.append(f"{docname}: a measurement does not support: {sentence}")
        if failures[docname]["cell"]:
            lines.append(f"{docname}: the notebook stopped at a failed cell: {failures[docname]['cell']}")
    if not lines:
        return
    strict = BUILD.get("mode", claims_mode()) == "strict"
    LOGGER.info("")
    LOGGER.info(f"failed checks ({len(lines)}), mode BOOK_CLAIMS={'strict' if strict else 'report'}:")
    for line in lines:
        if strict:
            LOGGER.warning(line, type="book", subtype="failed_check")
        else:
            LOGGER.info("  " + line)


def setup(app) -> None:
    # documented events only: a page read, a page forgotten or merged from a parallel reader, the end of the build
    app.connect("doctree-read", annotate_page)
    app.connect("env-purge-doc", purge_failures)
    app.connect("env-merge-info", merge_failures)
    app.connect("build-finished", list_failures)

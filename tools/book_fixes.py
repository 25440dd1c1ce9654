"""Sphinx extension loaded by _config.yml (``sphinx.local_extensions``): fixes for the book build.

Each fix lives in a module of tools/book_build/, named for it, whose docstring says why and how; this module wires
them into Sphinx (``setup``) and holds the last one, which pins the page to the commit built:

1. Bound a rare stall while notebooks execute (an nbclient wait that lasts the whole timeout): nbclient_stall.py.
2. Drop duplicate <script> tags; 3. ``html_baseurl`` from the repository address; 4. a 404 page: site_pages.py.
5. A failed check shows on its page (``BOOK_CLAIMS=strict|report``): its box where the hidden cell was
   (failure_slots.py), a banner under the title and the build's last lines listing every failure (page_header.py).
6. Provenance: at its foot, every notebook page says what produced its numbers: provenance.py.
7. Execution cache without stale numbers (emptied when the library, the requirements or torch's set-up change;
   every notebook executed in strict mode and CI): execution_cache.py.
8. The set-up cell installs what the page was built from. The committed set-up cell installs
   ``git+<repository>@<branch>`` (a file cannot name the commit it is part of). In the built page and in
   the page's downloadable ``.ipynb`` (``_sources/``) that source is pinned to the commit built
   (``git rev-parse HEAD``, or ``GITHUB_SHA``), and the Colab launch button opens the notebook at that
   commit (``repository_branch``). What runs is not changed: the executed notebook, hence the cache,
   keep the committed cell. On Colab, the notebook at that commit still installs ``<branch>``: README.md
   says so.

What the fixes share (the commit built, torch's set-up, the claims mode) is in book_build/facts.py. Where a fix
changes an internal of myst-nb or jupyter_client instead of using a documented hook (fix 1's poll, fix 5's two patches
of myst-nb, fix 7's forced execution mode), a comment there says why no documented hook does it; everything else,
fix 8 included, uses Sphinx's events.
"""

from __future__ import annotations

import sys
from pathlib import Path

from docutils import nodes

# jupyter-book puts tools/ on sys.path for the build (local_extensions); a test that loads this file by path does not
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))

from book_build import execution_cache, failure_slots, nbclient_stall, page_header, site_pages  # noqa: E402
from book_build.execution_cache import (  # noqa: E402
    DEFAULT_CACHE_INPUTS,
    ENV_FACTS,
    STAMP,
    cache_input_files,
    inputs_hash,
    outdated_notebooks,
    prepare_execution,
)
from book_build.facts import BUILD, git_commit, is_notebook, sync_tool  # noqa: E402
from book_build.failure_slots import SLOT_TAG, cell_mark, failure_html  # noqa: E402
from book_build.nbclient_stall import SLICE_S, get_msg  # noqa: E402
from book_build.page_header import BANNER_CLASS, annotate_page, list_failures  # noqa: E402
from book_build.provenance import PROVENANCE_CLASS, provenance_html  # noqa: E402
from book_build.site_pages import dedupe_scripts, set_baseurl, write_404  # noqa: E402

__all__ = [  # the parts' names, reachable from the extension (the tests load this file)
    "BANNER_CLASS",
    "DEFAULT_CACHE_INPUTS",
    "ENV_FACTS",
    "PROVENANCE_CLASS",
    "SLICE_S",
    "SLOT_TAG",
    "STAMP",
    "annotate_page",
    "cache_input_files",
    "cell_mark",
    "dedupe_scripts",
    "failure_html",
    "get_msg",
    "git_commit",
    "inputs_hash",
    "list_failures",
    "outdated_notebooks",
    "pin_downloads",
    "pin_launch_buttons",
    "pin_setup_cells",
    "pinned_setup_source",
    "prepare_execution",
    "provenance_html",
    "set_baseurl",
    "setup",
    "write_404",
]

# the build's facts (book_build/facts.py), under the name fix 8 reads them by: tests/test_colab.py replaces this
# module's _BUILD and git_commit, which is why fix 8 lives here and not in a part of its own
_BUILD = BUILD
_WRITTEN: set[str] = set()  # the notebook pages written in this build, whose downloads fix 8 pins


# ------------------------------------------------------------------ 8: the page installs the commit built


def pin_launch_buttons(app, config) -> None:
    """Remember the configured branch; point the launch (Colab) button at the commit being built."""
    options = dict(config.html_theme_options or {})
    commit, dirty = git_commit(Path(app.confdir))
    _BUILD.update(
        commit=commit, dirty=dirty, url=options.get("repository_url"), branch=options.get("repository_branch")
    )
    if commit and options.get("repository_branch"):
        options["repository_branch"] = commit
        config.html_theme_options = options


def pinned_setup_source(source: str) -> str:
    """The set-up cell's ``source`` installing the commit being built instead of the configured branch."""
    url, branch, commit = _BUILD.get("url"), _BUILD.get("branch"), _BUILD.get("commit")
    if not (url and branch and commit):
        return source
    sync = sync_tool()
    config = {"repository": {"url": url, "branch": branch}}
    return source.replace(
        f'"{sync.pip_source(config)}"', f'"{sync.pip_source({"repository": {"url": url, "branch": commit}})}"'
    )


def pin_setup_cells(app, doctree) -> None:
    """The page's copy of each set-up cell (the code myst-nb rendered for a cell tagged ``setup``) installs the
    commit built; the notebook that ran, and its outputs, keep the committed source."""
    for cell in doctree.findall(nodes.container):
        tags = (cell.get("cell_metadata") or {}).get("tags", [])
        if cell.get("nb_element") != "cell_code" or "setup" not in tags:
            continue
        for part in cell.children:
            if not (isinstance(part, nodes.container) and part.get("nb_element") == "cell_code_source"):
                continue
            for block in part.findall(nodes.literal_block):
                source = block.astext()
                pinned = pinned_setup_source(source)
                if pinned != source:  # rawsource too: Sphinx highlights a block only when the two agree
                    block.rawsource = pinned
                    block[:] = [nodes.Text(pinned)]


def note_written(app, pagename, templatename, context, doctree) -> None:
    if doctree is not None and is_notebook(app.env, pagename):
        _WRITTEN.add(pagename)


def pin_downloads(app, exception) -> None:
    """The downloadable copy of each notebook written in this build (``_sources/``) installs the built commit."""
    if exception is not None or app.builder.format != "html":
        return
    import nbformat

    for docname in sorted(_WRITTEN):
        path = Path(app.outdir, "_sources", docname + ".ipynb")
        if not path.is_file():
            continue
        nb = nbformat.read(path, as_version=4)
        changed = False
        for cell in nb.cells:
            if cell.cell_type == "code" and "setup" in cell.metadata.get("tags", []):
                pinned = pinned_setup_source(cell.source)
                changed, cell.source = changed or pinned != cell.source, pinned
        if changed:
            nbformat.write(nb, path)


def setup(app):
    nbclient_stall.setup(app)  # a patch of jupyter_client (why: nbclient_stall.install)
    site_pages.setup(app)
    # fix 8, on documented events: the configuration once read, each page read, each page written, the build's end
    app.connect("config-inited", pin_launch_buttons)
    app.connect("doctree-read", pin_setup_cells)
    app.connect("html-page-context", note_written)
    app.connect("build-finished", pin_downloads)
    execution_cache.setup(app)
    failure_slots.setup(app)  # patches of myst-nb (why: failure_slots.patch_myst_nb)
    page_header.setup(app)  # its build-finished handler comes last: the failures are the build's last lines
    return {"parallel_read_safe": True, "parallel_write_safe": True}

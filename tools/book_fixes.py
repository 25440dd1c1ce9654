"""Sphinx extension loaded by _config.yml (``sphinx.local_extensions``): fixes for the book build.

1. Bound a rare stall while notebooks execute.
   Symptom (NOTES.md): in a few builds out of a hundred, after a notebook's last cell the build
   waited exactly ``execute.timeout`` seconds, then went on as if nothing had happened.
   Where the wait is: myst-nb runs notebooks with nbclient, which waits for each kernel reply with
   ``await socket.poll(timeout)`` on a pyzmq *asyncio* socket (jupyter_client's
   ``AsyncZMQSocketChannel.get_msg``). Only when that poll's timer fires does pyzmq poll once more
   without waiting, and that final poll finds the reply: so a wake-up that was lost leaves the build
   waiting for the whole timeout, then it succeeds. The same symptom is reported upstream for
   notebooks with widgets (nbclient issue 312: "execute cell will sometimes block", where the
   maintainers point at ``shell_channel.get_msg`` returning only at its timeout) and for asyncio
   ZeroMQ polls in general (pyzmq issue 1558: the event is returned after the timeout; ZeroMQ
   signals readiness through an edge-triggered descriptor). We did not reproduce it here: 0 stalls
   in 169 executions of the quick start and of a small notebook with widgets (timeout 20 s, two
   busy cores), so this is the one code path that explains "exactly the timeout, then success",
   not an observed trace. While waiting for output (``timeout=None``) the same loss would last
   until nbclient's 4 s ``iopub_timeout`` and drop the cell's output.
   Fix: wait in slices of at most ``SLICE_S`` seconds. Each slice ends with that non-waiting poll,
   so a lost wake-up costs at most one slice; the total wait and the ``Empty`` at the deadline are
   unchanged. nbval (``make test``) uses jupyter_client's blocking client and is not affected.

2. Drop duplicate <script> tags. Scripts added by extensions during the build (sphinx-thebe's
   configuration, sphinx-togglebutton's selector) are emitted twice by Sphinx 7.4; the second copy
   of sphinx-thebe's ``const THEBE_JS_URL`` throws a SyntaxError on every page.

3. ``html_baseurl`` from the repository address. _config.yml holds the address once
   (``repository.url``); the site's address on GitHub Pages, ``https://<owner>.github.io/<repo>/``,
   is derived from it here with the same function that writes the README's "read online" link
   (``pages_url`` in tools/sync_setup_cells.py). Sphinx uses it for each page's canonical link.
   An explicit ``html.baseurl`` in _config.yml wins.

4. A 404 page. GitHub Pages answers a missing address with the site's ``404.html``, at whatever
   depth the reader was, so relative links cannot work there: the page is a small self-contained
   HTML file whose links are absolute, under ``html_baseurl``. Written when the HTML build finishes.
"""
from __future__ import annotations

import html
import importlib.util
import time
from pathlib import Path
from queue import Empty

from jupyter_client.channels import AsyncZMQSocketChannel

SLICE_S = 0.5


async def get_msg(self, timeout: float | None = None) -> dict:
    """``AsyncZMQSocketChannel.get_msg`` that polls in slices of at most ``SLICE_S`` (same contract)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        wait = SLICE_S if remaining is None else min(SLICE_S, remaining)
        if await self.socket.poll(int(wait * 1000)):
            return await self._recv()
        if remaining is not None and remaining <= wait:
            raise Empty


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """Keep the first of identical script entries (same file, same attributes and inline body)."""
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, kept = set(), []
    for js in scripts:
        key = (str(getattr(js, "filename", js) or ""),  # None and "" both mean an inline script
               tuple(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def _pages_url(repository_url: str) -> str:
    """``pages_url`` of tools/sync_setup_cells.py (loaded by path: tools/ is not a package)."""
    path = Path(__file__).with_name("sync_setup_cells.py")
    spec = importlib.util.spec_from_file_location("sync_setup_cells", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.pages_url(repository_url)


def set_baseurl(app, config) -> None:
    """``html_baseurl`` = the GitHub Pages address of ``repository.url``, unless set explicitly."""
    url = (config.html_theme_options or {}).get("repository_url")
    if not config.html_baseurl and url:
        config.html_baseurl = _pages_url(url)


PAGE_404 = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Page not found - {title}</title>
{icon}<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       max-width: 36rem; margin: 12vh auto; padding: 0 1.5rem; line-height: 1.5; }}
h1 {{ font-size: 1.6rem; }} a {{ color: #1f5fa8; }}
</style>
</head>
<body>
<h1>Page not found</h1>
<p>There is no page at this address in <em>{title}</em>. It may have moved when the book was reorganised.</p>
<p><a href="{base}index.html">Go to the start of the book</a> or <a href="{base}search.html">search it</a>.</p>
</body>
</html>
"""


def write_404(app, exception) -> None:
    """Write ``404.html`` (absolute links under ``html_baseurl``) into the HTML output folder."""
    if exception is not None or app.builder.format != "html":
        return
    base = app.config.html_baseurl or "/"
    base = base if base.endswith("/") else base + "/"
    title = html.escape(app.config.html_title or app.config.project)
    favicon = app.config.html_favicon
    icon = "" if not favicon or "://" in favicon else \
        f'<link rel="icon" href="{html.escape(base)}_static/{html.escape(Path(favicon).name)}">\n'
    page = PAGE_404.format(title=title, base=html.escape(base), icon=icon)
    Path(app.outdir, "404.html").write_text(page, encoding="utf-8")


def setup(app):
    AsyncZMQSocketChannel.get_msg = get_msg
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("config-inited", set_baseurl)
    app.connect("build-finished", write_404)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

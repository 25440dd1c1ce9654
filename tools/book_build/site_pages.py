"""Fixes 2-4, the site's own pages: no duplicate scripts, ``html_baseurl`` from the repository address, a 404 page.

2. Drop duplicate <script> tags. Scripts added by extensions during the build (sphinx-thebe's configuration,
   sphinx-togglebutton's selector) are emitted twice by Sphinx 7.4; the second copy of sphinx-thebe's
   ``const THEBE_JS_URL`` throws a SyntaxError on every page.

3. ``html_baseurl`` from the repository address. _config.yml holds the address once (``repository.url``); the site's
   address on GitHub Pages, ``https://<owner>.github.io/<repo>/``, is derived from it here with the same function that
   writes the README's "read online" link (``pages_url`` in tools/sync_setup_cells.py). Sphinx uses it for each
   page's canonical link. An explicit ``html.baseurl`` in _config.yml wins.

4. A 404 page. GitHub Pages answers a missing address with the site's ``404.html``, at whatever depth the reader was,
   so relative links cannot work there: the page is a small self-contained HTML file whose links are absolute, under
   ``html_baseurl``. Written when the HTML build finishes.
"""

from __future__ import annotations

import html
from pathlib import Path

from .facts import sync_tool


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """Keep the first of identical script entries (same file, same attributes and inline body)."""
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, kept = set(), []
    for js in scripts:
        key = (
            str(getattr(js, "filename", js) or ""),  # None and "" both mean an inline script
            tuple(sorted(getattr(js, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def set_baseurl(app, config) -> None:
    """``html_baseurl`` = the GitHub Pages address of ``repository.url``, unless set explicitly."""
    url = (config.html_theme_options or {}).get("repository_url")
    if not config.html_baseurl and url:
        config.html_baseurl = sync_tool().pages_url(url)


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
    icon = (
        ""
        if not favicon or "://" in favicon
        else f'<link rel="icon" href="{html.escape(base)}_static/{html.escape(Path(favicon).name)}">\n'
    )
    page = PAGE_404.format(title=title, base=html.escape(base), icon=icon)
    Path(app.outdir, "404.html").write_text(page, encoding="utf-8")


def setup(app) -> None:
    # documented events only: each page's template context, the configuration once read, the end of the build
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("config-inited", set_baseurl)
    app.connect("build-finished", write_404)

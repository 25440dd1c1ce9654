"""Sphinx extension loaded by _config.yml (``sphinx.local_extensions``): the book's editions link to each other.

``book_languages`` lists the editions built together (``tools/book_i18n.py`` sets it; empty in a plain ``make book``,
whose pages then link to no edition that was not built): ``[{"code": "en", "path": "", "label": "English"},
{"code": "zh_CN", "path": "zh/", "label": "中文"}]``, each ``path`` relative to the site's root. Every page of each
edition then gets, above its content, a link to the same page in every other edition (the same ``pagename``: both
editions are built from the same sources), and ``<link rel="alternate" hreflang=...>`` tags; a translated edition's
``html_baseurl`` gets its ``path`` (its canonical links point into it), and its notebook pages say that the code,
its comments and outputs are the English notebook's (``book_language_notes``).
"""

from __future__ import annotations

import html

SWITCH_CLASS = "book-language-switch"
NOTE_CLASS = "book-language-note"
NOTES = {
    "zh_CN": "本页的代码、代码注释和输出与英文版相同（同一个 notebook、同一次运行）；"
    "在 Colab 中打开或下载的也是英文 notebook。"
}


def _current(config) -> str:
    return (config.language or "en").replace("-", "_")


def _edition(config, code: str) -> dict | None:
    return next((e for e in config.book_languages if e["code"] == code), None)


def _hreflang(code: str) -> str:
    return code.replace("_", "-")


def set_baseurl(app, config) -> None:
    """A translated edition's canonical address is under its own path."""
    edition = _edition(config, _current(config))
    if edition and edition["path"] and config.html_baseurl and not config.html_baseurl.endswith(edition["path"]):
        config.html_baseurl = config.html_baseurl.rstrip("/") + "/" + edition["path"]


def edition_link(pagename: str, here: dict, there: dict) -> str:
    """Relative address of ``pagename`` in edition ``there`` from the same page in edition ``here``."""
    depth = pagename.count("/") + here["path"].strip("/").count("/") + (1 if here["path"].strip("/") else 0)
    return "../" * depth + there["path"] + pagename + ".html"


def add_switch(app, pagename, templatename, context, doctree) -> None:
    config = app.config
    here = _edition(config, _current(config))
    if here is None or "body" not in context:
        return
    others = [e for e in config.book_languages if e is not here]
    links = "".join(
        f'<a href="{html.escape(edition_link(pagename, here, e))}" hreflang="{_hreflang(e["code"])}" '
        f'lang="{_hreflang(e["code"])}">{html.escape(e["label"])}</a>'
        for e in others
    )
    switch = (
        f'<nav class="{SWITCH_CLASS}" aria-label="Language / 语言" '
        f'style="text-align:right;font-size:90%;margin:0 0 0.5em 0">{links}</nav>'
    )
    note = ""
    text = config.book_language_notes.get(here["code"])
    if text and doctree is not None and str(app.env.doc2path(pagename)).endswith(".ipynb"):
        note = f'<p class="{NOTE_CLASS}" style="font-size:85%;color:#555;margin:0.2em 0 1em 0">{html.escape(text)}</p>'
    context["body"] = switch + note + context["body"]
    context["metatags"] = context.get("metatags", "") + "".join(
        f'\n<link rel="alternate" hreflang="{_hreflang(e["code"])}" '
        f'href="{html.escape(edition_link(pagename, here, e))}" />'
        for e in config.book_languages
    )


def setup(app):
    app.add_config_value("book_languages", [], "html")
    app.add_config_value("book_language_notes", NOTES, "html")
    app.connect("config-inited", set_baseurl, priority=900)  # after book_fixes derived html_baseurl
    app.connect("html-page-context", add_switch)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

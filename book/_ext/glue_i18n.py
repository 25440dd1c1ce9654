"""Sphinx extension loaded by _config.yml (``sphinx.local_extensions``): glued values in translated pages.

The problem (seen when the Chinese edition was first built).
A translated build (``-D language=zh_CN``) replaces each message of a
page by its ``msgstr`` from ``locales/<lang>/LC_MESSAGES/<doc>.po``. Sphinx parses every ``msgstr`` as a small
document of its own (``sphinx.transforms.i18n.publish_msgstr``: the source is ``<page>:<line>:<translated>``), and
myst-nb parses such a document with the plain MyST parser (``myst_nb.sphinx_.Parser.parse``, "endswith
'<translated>'"). The glue roles in it then find no notebook: ``{glue:text}`acc:.1%``` renders nothing and warns
"No key 'acc' found in glue data for this document", and the Chinese page would lose every live number.

Where the glue data is. While myst-nb parses a notebook it keeps, on the document, its element renderer
(``document["nb_renderer"]``, a ``myst_nb.core.render.NbElementRenderer``), whose notebook client holds the page's
glue data (``nb_client.glue_data``: name -> the glued output's MIME bundle, the same dict it writes to
``<jupyter_execute>/<doc>.glue.json``); the glue roles and directives read it there (``retrieve_glue_data``). At the
end of the parse myst-nb drops that attribute, and only then do Sphinx's transforms, the translation among them,
run on the page.

The fix. Keep the page's element renderer when myst-nb creates it (one page at a time: the translation of a page
runs right after its parse, in the same process), and hand it to each translated message of that page while the
message is parsed. myst-nb's own roles and directives then resolve ``glue:text`` (with and without a format spec),
``glue:md``, ``glue:`` / ``glue:any`` and glued figures exactly as in the English page: the same values, the same
nodes, no warning. Nothing changes in an untranslated build or for a message without glue.

A word that a measurement chose (``transformer_lib.book_tools.claims.glue_choice``: the English word glued as ``name``,
its key
as ``name__key``) is written in a translation as ``{glue:choice}`name|faster=更快|slower=更慢|within_noise=...```:
the role looks up the page's glued key and shows that language's word for it; a key the translation does not
list is a warning (an error under ``-W``), never a silent English word. The word ``*`` shows the English glued text
as it is, for a key whose text is only numbers (``attn_slower_at|lengths=*|none=所测长度中没有``: the lengths
where there are some, the translation's words where there are none).
"""

from __future__ import annotations

import ast
import re
from contextvars import ContextVar

from docutils import nodes

AS_GLUED = "*"  # a choice word that stands for the glued English text itself
TRANSLATED = "<translated>"  # the end of a translated message's source path (sphinx.transforms.i18n.publish_msgstr)

_PAGE: ContextVar[str | None] = ContextVar("glue_i18n_page", default=None)  # the notebook myst-nb is parsing
_KEPT: dict[str, object] = {}  # docname -> that page's NbElementRenderer (only the page being read)


def _keeping(load_renderer):
    """``myst_nb.sphinx_.load_renderer`` whose renderers are kept for the page being parsed."""

    def keeping_load_renderer(name: str):
        cls = load_renderer(name)

        def make(renderer, logger):
            element = cls(renderer, logger)
            page = _PAGE.get()
            if page is not None:
                _KEPT.clear()
                _KEPT[page] = element
            return element

        return make

    keeping_load_renderer.glue_i18n = True
    return keeping_load_renderer


def _with_page_glue(parse):
    """``myst_nb.sphinx_.Parser.parse`` that lends a translated message its page's element renderer."""

    def parse_with_page_glue(self, inputstring, document):
        env = getattr(document.settings, "env", None) or self.env
        docname = getattr(env, "docname", None)
        if not document.current_source.endswith(TRANSLATED):
            token = _PAGE.set(docname)
            try:
                return parse(self, inputstring, document)
            finally:
                _PAGE.reset(token)
        element = _KEPT.get(docname)
        if element is None or "nb_renderer" in document:
            return parse(self, inputstring, document)
        document["nb_renderer"] = element  # what myst-nb's glue roles read (retrieve_glue_data)
        try:
            warn_english_choices(inputstring, document, docname)
            return parse(self, inputstring, document)
        finally:
            document.attributes.pop("nb_renderer", None)

    parse_with_page_glue.glue_i18n = True
    return parse_with_page_glue


GLUE_TEXT = re.compile(r"\{glue:text\}`([^`:]+)")


def warn_english_choices(text: str, document, docname: str | None) -> None:
    """A translated message that shows a word a measurement chose with ``{glue:text}`` shows the English word in a
    page of another language: warn (an error under ``-W``), naming the role to write instead."""
    from myst_nb.core.variables import RetrievalError
    from myst_nb.ext.glue.utils import retrieve_glue_data
    from sphinx.util import logging

    for name in GLUE_TEXT.findall(text):
        try:
            retrieve_glue_data(document, name.strip() + CHOICE_KEY_SUFFIX)
        except RetrievalError:
            continue  # a glued number or text, the same in every language
        logging.getLogger(__name__).warning(
            f"glue:choice: the translation shows {{glue:text}}`{name}`, a word a measurement chose (glue_choice): "
            f"write {{glue:choice}}`{name}|key=word|...` with a word for each of its keys "
            f"(`*` keeps the glued text where it is numbers)",
            location=docname,
        )


def forget_page(app, doctree) -> None:
    """After a page is read (its translation done), drop what was kept for it."""
    _KEPT.pop(app.env.docname, None)


def patch_myst_nb() -> None:
    import myst_nb.sphinx_ as nb_sphinx

    if not getattr(nb_sphinx.load_renderer, "glue_i18n", False):
        nb_sphinx.load_renderer = _keeping(nb_sphinx.load_renderer)
    if not getattr(nb_sphinx.Parser.parse, "glue_i18n", False):
        nb_sphinx.Parser.parse = _with_page_glue(nb_sphinx.Parser.parse)


CHOICE_KEY_SUFFIX = (
    "__key"  # transformer_lib.book_tools.claims.CHOICE_KEY_SUFFIX (not imported: the build needs no torch)
)


def parse_choice(text: str) -> tuple[str, dict[str, str]]:
    """``name|key=word|key=word`` -> (name, {key: word})."""
    name, *pairs = [part.strip() for part in text.split("|")]
    words = {}
    for pair in pairs:
        key, sep, word = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{pair!r} is not key=word")
        words[key.strip()] = word.strip()
    return name, words


def _plain_text(data) -> str:
    """A glued string as text: glue stores its repr ("'faster'") as text/plain."""
    text = data.data.get("text/plain", "")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, str) else text


def choice_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{glue:choice}`name|key=word|...```: the word of this language for the key a measurement chose."""
    from myst_nb.core.variables import RetrievalError
    from myst_nb.ext.glue.utils import retrieve_glue_data

    document = inliner.document

    def problem(message: str):
        msg = inliner.reporter.warning(f"glue:choice: {message}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]

    try:
        glued, words = parse_choice(text)
        data = retrieve_glue_data(document, glued + CHOICE_KEY_SUFFIX)
    except (ValueError, RetrievalError) as exc:
        return problem(str(exc))
    key = _plain_text(data)
    if key not in words:
        return problem(
            f"the measurement chose {key!r} for {glued!r}, which the text gives no word for (it gives {sorted(words)})"
        )
    word, classes = words[key], ["pasted-text", "glue-choice"]  # a word of this language (tests tell it apart)
    if word == AS_GLUED:  # numbers, or a list of them, that read the same in every language
        word, classes = _plain_text(retrieve_glue_data(document, glued)), ["pasted-text"]
    return [nodes.inline(word, word, classes=classes)], []


def setup(app):
    patch_myst_nb()
    app.add_role_to_domain("glue", "choice", choice_role)  # myst-nb registers the glue domain first
    app.connect("doctree-read", forget_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""The Chinese edition (issue 30): glued values inside translated messages, and the catalogs' check.

A tiny two-page book (a notebook gluing a number, a formatted number, a Markdown table and a figure, and a plain
page) is built in English, its messages extracted (``-b gettext``), translated here, and built again with
``language=zh_CN`` from the same execution cache. Without ``book/_ext/glue_i18n.py`` every glue role inside a
translated message renders nothing, with a warning (the module's docstring says why): the tests below would fail.
"""

from __future__ import annotations

import functools
import html
import io
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]

GLUE_CELL = """\
from myst_nb import glue
from IPython.display import Markdown
import matplotlib.pyplot as plt

glue("n_steps", 120, display=False)
glue("acc", 0.87654, display=False)
glue("table", Markdown("| heads | loss |\\n|---|---|\\n| 4 | 2.31 |"), display=False)
glue("verdict", Markdown("**1.5x** `faster`"), display=False)
from transformer_lib.book_tools.claims import glue_choice
glue_choice("speed_word", "slower", {"faster": "faster than", "slower": "slower than"})
glue_choice("slower_at", "lengths", {"lengths": "64, 128", "none": "none of the lengths"})
glue_choice("faster_at", "none", {"lengths": "", "none": "none of the lengths"})
fig, ax = plt.subplots(figsize=(2, 1.5))
ax.plot([0, 1, 2], [3, 1, 2])
ax.set_xlabel("step")
glue("loss_fig", fig, display=False)
plt.close(fig)
"""

PROSE = """\
# A glued page

After {glue:text}`n_steps` steps the model reaches {glue:text}`acc:.1%` accuracy ({glue:}`acc`).

The cache is {glue:md}`verdict:gfm` here, over {glue:any}`n_steps` steps.

The loop is {glue:text}`speed_word` the batch.

Slower at {glue:text}`slower_at`; faster at {glue:text}`faster_at`.

```{glue:md} table
:format: gfm
```

```{glue:figure} loss_fig
:name: fig-loss

The loss over {glue:text}`n_steps` steps.
```
"""

TRANSLATIONS = {
    "A glued page": "一个粘贴了数值的页面",
    "After {glue:text}`n_steps` steps the model reaches {glue:text}`acc:.1%` accuracy ({glue:}`acc`).": (
        "训练 {glue:text}`n_steps` 步之后，模型的准确率达到 {glue:text}`acc:.1%`（{glue:}`acc`）。"
    ),
    "The cache is {glue:md}`verdict:gfm` here, over {glue:any}`n_steps` steps.": (
        "在这里缓存{glue:md}`verdict:gfm`，共 {glue:any}`n_steps` 步。"
    ),
    "The loss over {glue:text}`n_steps` steps.": "{glue:text}`n_steps` 步内的损失。",
    "heads": "头数",  # the glued table's cells are messages too
    "loss": "损失",
    "The loop is {glue:text}`speed_word` the batch.": (
        "循环{glue:choice}`speed_word|faster=比批处理快|slower=比批处理慢`。"
    ),
    "Slower at {glue:text}`slower_at`; faster at {glue:text}`faster_at`.": (
        "更慢的长度：{glue:choice}`slower_at|lengths=*|none=没有`；更快的长度：{glue:choice}`faster_at|lengths=*|none=没有`。"
    ),
    "Plain page": "普通页面",
    "It links to [the glued page](glued.ipynb).": "它链接到[粘贴了数值的页面](glued.ipynb)。",
}

CONF = """\
import sys
sys.path.insert(0, {ext!r})
project = "tiny"
extensions = ["myst_nb", "glue_i18n"]
root_doc = "index"
exclude_patterns = ["_build", "locales"]
nb_execution_mode = "cache"
nb_execution_cache_path = {cache!r}
nb_kernel_rgx_aliases = {{".*": "python3"}}
nb_render_markdown_format = "gfm"
locale_dirs = ["locales/"]
gettext_compact = False
suppress_warnings = ["epub"]
"""


def _write_book(src: Path) -> None:
    src.mkdir(parents=True)
    (src / "conf.py").write_text(CONF.format(ext=str(ROOT / "book" / "_ext"), cache=str(src / "_build" / "cache")))
    (src / "index.md").write_text(
        "# Plain page\n\nIt links to [the glued page](glued.ipynb).\n\n```{toctree}\nglued\n```\n"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(GLUE_CELL), nbformat.v4.new_markdown_cell(PROSE)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src / "glued.ipynb")


def _build(src: Path, builder: str, out: str, **overrides) -> tuple[str, str]:
    """Build ``src`` in this process; (status log, warnings)."""
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace, patch_docutils

    status, warning = io.StringIO(), io.StringIO()
    with patch_docutils(str(src)), docutils_namespace():
        app = Sphinx(
            str(src),
            str(src),
            str(src / "_build" / out),
            str(src / "_build" / f"{out}.doctrees"),
            builder,
            confoverrides=overrides,
            status=status,
            warning=warning,
            freshenv=True,
        )
        app.build()
    return status.getvalue(), warning.getvalue()


def _translate_catalogs(pot_dir: Path, locale: Path) -> None:
    from babel.messages.mofile import write_mo  # noqa: F401 - Sphinx compiles the .po itself
    from babel.messages.pofile import read_po, write_po

    for pot in pot_dir.glob("*.pot"):
        with pot.open("rb") as f:
            catalog = read_po(f)
        for message in catalog:
            if message.id:
                message.string = TRANSLATIONS.get(message.id, "")
        target = locale / "zh_CN" / "LC_MESSAGES" / f"{pot.stem}.po"
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as f:
            write_po(f, catalog)


def _text(page: str) -> str:
    body = page.split('role="main"', 1)[-1]
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))


@pytest.fixture(scope="module")
def tiny_book(tmp_path_factory):
    src = tmp_path_factory.mktemp("i18n") / "book"
    _write_book(src)
    en = _build(src, "html", "en")
    pot = _build(src, "gettext", "gettext")
    _translate_catalogs(src / "_build" / "gettext", src / "locales")
    zh = _build(src, "html", "zh", language="zh_CN")
    return {
        "src": src,
        "en": en,
        "pot": pot,
        "zh": zh,
        "en_page": (src / "_build/en/glued.html").read_text(),
        "zh_page": (src / "_build/zh/glued.html").read_text(),
    }


def test_glued_values_in_translated_messages_render_as_in_english(tiny_book):
    en, zh = _text(tiny_book["en_page"]), _text(tiny_book["zh_page"])
    assert "After 120 steps the model reaches 87.7% accuracy ( 0.87654 )" in en
    assert "训练 120 步之后，模型的准确率达到 87.7% （ 0.87654 ）" in zh
    assert "The loss over 120 steps" in en and "120 步内的损失" in zh


def test_glued_markdown_table_and_figure_render_in_the_translation(tiny_book):
    en, zh = tiny_book["en_page"], tiny_book["zh_page"]
    assert "<strong>1.5x</strong>" in en and "<strong>1.5x</strong>" in zh  # glue:md inside a message
    assert "The cache is 1.5x faster here, over 120 steps." in _text(en).replace(" ,", ",").replace("  ", " ")
    assert re.search(r"在这里缓存 ?1\.5x ?faster ?，共 120 步。", _text(zh))
    for page, header in ((en, "heads"), (zh, "头数")):  # the glued table, its header cells translated
        assert re.search(rf"<table.*?{header}.*?2\.31.*?</table>", page, re.S)
        figure = re.search(r'<figure[^>]*id="fig-loss".*?</figure>', page, re.S)
        assert figure and re.search(r'<img[^>]+src="_images/[0-9a-f]+\.png"', figure.group(0))
    images = [re.findall(r'src="(_images/[0-9a-f]+\.png)"', page) for page in (en, zh)]
    assert images[0] == images[1]  # the same figure, the same file


def test_a_word_the_measurement_chose_is_the_translations_own_word(tiny_book):
    assert "The loop is slower than the batch." in _text(tiny_book["en_page"]).replace(" .", ".")
    assert re.search(r"循环 ?比批处理慢 ?。", _text(tiny_book["zh_page"]))


def test_a_translation_that_shows_a_chosen_english_word_is_warned_about(caplog):
    """{glue:text} of a glue_choice name in a translated message would show the English word: a warning (an error
    under -W) that names the role to write; a glued number is not warned about."""
    import logging
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import glue_i18n

    glued = {name: {"data": {"text/plain": "''"}} for name in ("speed_word", "speed_word__key", "n_steps")}
    renderer = SimpleNamespace(renderer=SimpleNamespace(nb_client=SimpleNamespace(glue_data=glued)))
    with caplog.at_level(logging.WARNING):
        glue_i18n.warn_english_choices(
            "循环{glue:text}`speed_word`批处理，{glue:text}`n_steps:.0f` 步。", {"nb_renderer": renderer}, "page"
        )
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "{glue:choice}`speed_word|key=word|...`" in warned[0], warned


def test_a_choice_word_star_shows_the_glued_numbers_as_they_are(tiny_book):
    assert re.search(r"Slower at 64, 128 ?; faster at none of the lengths ?\.", _text(tiny_book["en_page"]))
    assert re.search(r"更慢的长度： ?64, 128 ?；更快的长度： ?没有 ?。", _text(tiny_book["zh_page"]))


def test_translated_build_warns_nothing_and_executes_nothing(tiny_book):
    assert tiny_book["en"][1] == "" and tiny_book["pot"][1] == ""
    assert tiny_book["zh"][1] == "", tiny_book["zh"][1]
    assert "Executing" in tiny_book["en"][0]
    assert "Executing" not in tiny_book["zh"][0] and "Executing" not in tiny_book["pot"][0]


# ----------------------------------------------------------------------------- the catalogs and their check


def _book_i18n():
    import importlib.util

    spec = importlib.util.spec_from_file_location("book_i18n", ROOT / "tools" / "book_i18n.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PO_HEADER = """\
#, fuzzy
msgid ""
msgstr ""
"Language: zh_CN\\n"
"Content-Type: text/plain; charset=utf-8\\n"

"""


def _po(tmp_path, body: str) -> Path:
    path = tmp_path / "zh_CN" / "LC_MESSAGES" / "page.po"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PO_HEADER + body, encoding="utf-8")
    return path


def test_check_accepts_a_faithful_translation_and_ignores_the_fuzzy_header(tmp_path):
    tool = _book_i18n()
    path = _po(
        tmp_path,
        'msgid "Accuracy is {glue:text}`acc:.1%` with `d_model` and $\\\\sqrt{d}$, '
        'see [the paper](x.md)."\n'
        'msgstr "准确率为 {glue:text}`acc:.1%`，使用 `d_model` 和 $\\\\sqrt{d}$，见[论文](x.md)。"\n',
    )
    assert tool.check_catalog(path, release=True) == []


@pytest.mark.parametrize(
    "msgstr, missing",
    [
        ("准确率为 {glue:text}`acc:.2%`。", "role {glue:text}`acc:.1%`"),  # a changed format spec
        ("准确率为 {glue:text}`acc`。", "role {glue:text}`acc:.1%`"),
        ("准确率为 87%。", "role {glue:text}`acc:.1%`"),  # a typed number instead of the glue
        ("准确率为 {glue:text}`acc:.1%`，`dmodel`。", "code d_model"),
        ("{glue:text}`acc:.1%` `d_model` $d$ [论文](y.md)", "link x.md"),
        ("{glue:text}`acc:.1%` `d_model` $\\\\sqrt{d}$ 论文", "link x.md"),
        ("{glue:text}`acc:.1%` `d_model` [论文](x.md)", "math $\\sqrt{d}$"),
    ],
)
def test_check_fails_when_a_translation_changes_roles_code_math_or_links(tmp_path, msgstr, missing):
    tool = _book_i18n()
    path = _po(
        tmp_path,
        'msgid "Accuracy is {glue:text}`acc:.1%` with `d_model`, $\\\\sqrt{d}$ [the paper](x.md)."\n'
        f'msgstr "{msgstr}"\n',
    )
    problems = tool.check_catalog(path, release=False)
    assert len(problems) == 1 and missing in problems[0], problems


def test_check_reads_a_chosen_word_as_the_english_glue_role(tmp_path):
    tool = _book_i18n()
    path = _po(
        tmp_path,
        'msgid "It is {glue:text}`w` here."\n'
        'msgstr "这里{glue:choice}`w|faster=更快|slower=更慢`。"\n\n'
        'msgid "And {glue:text}`w` there."\nmsgstr "那里{glue:choice}`v|faster=更快`。"\n',
    )
    problems = tool.check_catalog(path, release=True)
    assert len(problems) == 1 and "missing: role {glue:text}`w`" in problems[0]


def test_check_lets_a_cross_reference_translate_its_text_but_not_its_target(tmp_path):
    tool = _book_i18n()
    path = _po(
        tmp_path,
        'msgid "See {doc}`the source articles <../book/sources>` and {doc}`../notebooks/attention`."\n'
        'msgstr "见{doc}`源文章 <../book/sources>`和{doc}`第 02 章 <../notebooks/attention>`。"\n\n'
        'msgid "Read {doc}`the notation <../book/notation>`."\nmsgstr "读{doc}`记号 <../book/sources>`。"\n',
    )
    problems = tool.check_catalog(path, release=True)
    assert len(problems) == 1 and "missing: role {doc}`../book/notation`" in problems[0], problems


def test_update_drops_the_format_flags_gettext_guesses_for_prose(tmp_path):
    """A "95%" or a glue role makes the extractor guess python-format / python-brace-format; with the flag,
    `msgfmt --check` rejects the faithful translation of a sentence that is not a format string."""
    tool = _book_i18n()
    path = _po(
        tmp_path,
        '#\n#: a.md\n#, python-format\nmsgid "a 95% interval"\nmsgstr "95% 区间"\n\n'
        '#, fuzzy, python-brace-format, python-format\nmsgid "{glue:text}`x` at 95%"\nmsgstr "95% 时 {glue:text}`x`"\n',
    )
    tool.drop_format_flags(path)
    text = path.read_text(encoding="utf-8")
    assert "python" not in text and "#\n#: a.md\nmsgid" in text and "#, fuzzy\nmsgid" in text
    assert text.startswith(PO_HEADER)
    if shutil.which("msgfmt"):
        assert subprocess.run(["msgfmt", "--check", "-o", "/dev/null", str(path)]).returncode == 0


def test_choice_roles_parse_their_words():
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import glue_i18n

    assert glue_i18n.parse_choice("w|faster=更快 |within_noise= 差别在噪声之内") == (
        "w",
        {"faster": "更快", "within_noise": "差别在噪声之内"},
    )
    with pytest.raises(ValueError, match="is not key=word"):
        glue_i18n.parse_choice("w|faster")


def test_release_check_fails_on_fuzzy_and_untranslated_entries_draft_check_does_not(tmp_path):
    tool = _book_i18n()
    path = _po(
        tmp_path,
        '#, fuzzy\nmsgid "New {glue:text}`n` words"\nmsgstr "旧的 {glue:text}`m`"\n\n'
        'msgid "Not yet"\nmsgstr ""\n\nmsgid "Done"\nmsgstr "完成"\n',
    )
    assert tool.check_catalog(path, release=False) == []  # a fuzzy entry is not used by the build
    problems = tool.check_catalog(path, release=True)
    assert len(problems) == 2 and "fuzzy" in problems[0] and "untranslated" in problems[1]
    assert tool.check(["zh_CN"], release=True, locales=tmp_path) == 1


def _toc_pages() -> list[str]:
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_one_catalog_per_page_and_every_catalog_keeps_its_markup():
    tool = _book_i18n()
    catalogs = ROOT / "locales" / "zh_CN" / "LC_MESSAGES"
    assert sorted(str(p.relative_to(catalogs).with_suffix("")) for p in catalogs.rglob("*.po")) == sorted(_toc_pages())
    assert tool.check(["zh_CN"], release=False) == 0


# -------------------------------------------------------------- the built editions (make book, then test-site)

SITE = ROOT / "_build" / "html"


def _chinese_edition() -> Path:
    from devtools import no_built_site

    zh = SITE / "zh"
    if not (zh / "index.html").is_file():
        no_built_site(f"no Chinese edition at {zh}: run `make book` first (it builds both editions)")
    return zh


def _pages(edition: Path) -> list[Path]:
    """The edition's pages (not its _static, _sources, search, index and redirect pages), relative to it."""
    skip = {"search.html", "genindex.html"}
    return sorted(
        p.relative_to(edition)
        for p in edition.rglob("*.html")
        if not p.relative_to(edition).parts[0].startswith("_")
        and p.name not in skip
        and not p.read_text(encoding="utf-8").startswith('<meta http-equiv="Refresh"')
    )


def _glued(page: Path) -> Counter:
    """The glued values a page shows (a translation may put them in another order). A word a measurement chose
    is left out: the English page shows the English word, the translation its own (class ``glue-choice``)."""
    values = Counter(re.findall(r'<span class="pasted-text">([^<]*)</span>', page.read_text(encoding="utf-8")))
    for value in _choice_words(page.relative_to(SITE).as_posix().removeprefix("zh/")):
        del values[html.escape(value, quote=False)]
        del values[html.escape(value.replace("'", "\u2019"), quote=False)]  # Sphinx's smart apostrophe
    return values


def _choice_words(page: str) -> set[str]:
    """The English words glued by glue_choice in the notebook of ``page`` (its ``<name>__key`` siblings), from
    the glue data myst-nb wrote beside the build (``_build/jupyter_execute/<doc>.glue.json``)."""
    import ast
    import json

    path = SITE.parent / "jupyter_execute" / page.replace(".html", ".glue.json")
    if not path.is_file():
        return set()
    data = json.loads(path.read_text(encoding="utf-8"))
    text = {name: ast.literal_eval(d["data"].get("text/plain", "''")) for name, d in data.items()}
    return {str(text[name.removesuffix("__key")]) for name in text if name.endswith("__key")}


@pytest.mark.site
def test_every_chinese_page_shows_the_english_pages_glued_values():
    zh = _chinese_edition()
    pages = _pages(zh)
    assert (SITE.parent / "jupyter_execute" / "notebooks" / "quickstart.glue.json").is_file()
    differ = [str(p) for p in pages if (SITE / p).is_file() and _glued(SITE / p) != _glued(zh / p)]
    assert not differ, f"glued values differ between the editions on: {differ}"
    assert sum(sum(_glued(zh / p).values()) for p in pages) > 500  # a test that compared nothing would pass


@pytest.mark.site
def test_every_page_links_to_the_same_page_in_the_other_edition():
    zh = _chinese_edition()
    pages = _pages(zh)
    assert "notebooks/quickstart.html" in map(str, pages) and len(pages) >= 18
    assert set(pages) <= {p for p in _pages(SITE) if p.parts[0] != "zh"} | {Path("404.html")}
    for name in pages:
        for here, there in ((SITE, zh), (zh, SITE)):
            page = here / name
            switch = re.search(r'<nav class="book-language-switch".*?href="([^"]+)"', page.read_text(encoding="utf-8"))
            assert switch, f"{page}: no language switch"
            assert (page.parent / switch.group(1).split("#")[0]).resolve() == (there / name).resolve(), page


# ------------------------------------------------------------------------------------------ the glossary


def _variants(term: str) -> list[str]:
    """The English term's spellings: ``layer normalization (LayerNorm)`` -> both; ``a / b`` and ``a, b`` -> each."""
    names = re.findall(r"\(([^)]+)\)", term) + [re.sub(r"\s*\([^)]*\)", "", term)]
    return [v.strip() for name in names for v in re.split(r"\s*/\s*|,\s*", name) if v.strip()]


def _pattern(variant: str) -> str:
    words = [re.escape(w) for w in variant.split()]
    last = words[-1]
    words[-1] = last[:-1] + "(y|ies)" if last.endswith("y") else last + "(s|es)?"
    return r"\b" + r"\s+".join(words) + r"\b"


def first_chapter_using(term: str, chapters: list[str]) -> str | None:
    """The first chapter (in reading order) whose prose uses the term, in any of its spellings."""
    patterns = [_pattern(v) for v in _variants(term)]
    for chapter in chapters:
        if any(re.search(p, _prose(chapter), re.I) for p in patterns):
            return chapter
    return None


@functools.cache
def _prose(chapter: str) -> str:
    """A chapter's Markdown cells (read once: the glossary test asks for every term)."""
    nb = nbformat.read(ROOT / f"{chapter}.ipynb", as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def glossary_rows() -> list[tuple[str, str, str]]:
    """(English, 中文, the chapter named in 'first used in') of book/glossary.md's table."""
    rows = []
    for line in (ROOT / "book" / "glossary.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) == 3 and not set(cells[0]) <= set("-: ") and cells[0] != "English":
            chapter = re.search(r"\{doc\}`\.\./(notebooks/[^`]+)`", cells[2])
            rows.append((cells[0], cells[1], chapter.group(1) if chapter else cells[2]))
    return rows


def test_glossary_names_the_chapter_where_each_term_is_first_used():
    chapters = [p for p in _toc_pages() if p.startswith("notebooks/")]
    rows = glossary_rows()
    assert len(rows) >= 30
    wrong = [
        (en, chapter, first_chapter_using(en, chapters))
        for en, _, chapter in rows
        if first_chapter_using(en, chapters) != chapter
    ]
    assert not wrong, f"(term, glossary says, first used in): {wrong}"


def test_glossary_has_the_source_articles_standard_terms():
    chinese = {zh for _, zh, _ in glossary_rows()}
    for term in ["注意力", "查询/键/值", "多头注意力", "位置编码", "掩码", "剪枝", "量化"]:
        assert term in chinese, term


def test_forced_execution_for_two_editions_writes_the_cache_the_translation_reads(tmp_path, monkeypatch):
    """Strict mode (CI) executes every notebook; for tools/book_i18n.py it does so into an emptied cache (which
    the Chinese edition then reads), not in myst-nb's force mode, which writes no cache."""
    import importlib.util
    from types import SimpleNamespace

    from myst_nb.core.config import NbParserConfig

    spec = importlib.util.spec_from_file_location("book_fixes", ROOT / "tools" / "book_fixes.py")
    fixes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixes)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("BOOK_CLAIMS", "strict")
    (tmp_path / "lib.py").write_text("x = 1\n")
    cache = tmp_path / "_build" / ".jupyter_cache"
    for into_cache, mode in ((True, "cache"), (False, "force")):
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "global.db").write_text("executed notebooks")
        config = NbParserConfig(execution_mode="cache", execution_cache_path=str(cache))
        app = SimpleNamespace(
            confdir=str(tmp_path),
            env=SimpleNamespace(mystnb_config=config),
            config=SimpleNamespace(book_cache_inputs=["lib.py"], book_execute_into_cache=into_cache),
        )
        fixes.prepare_execution(app)
        assert app.env.mystnb_config.execution_mode == mode
        assert (cache / "global.db").exists() is (not into_cache)  # emptied: every notebook executes, into it
    assert tool_overrides_execute_into_cache()


def tool_overrides_execute_into_cache() -> bool:
    return _book_i18n().edition_overrides("en")["book_execute_into_cache"] is True

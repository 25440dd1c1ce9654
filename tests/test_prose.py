"""What the prose names exists: citations go through the bibliography, library names and chapter references resolve.

Read from the committed sources (markdown cells of the notebooks, the front matter in ``book/``), no build needed:

* every citation is a ``{cite}`` role on ``book/references.bib``: an "et al." or an author's surname followed by a year
  outside a role fails (one citation style book-wide, and every cited paper is listed on the References page);
* every dotted name in backticks whose head is the library, one of its modules, or a name the notebook binds resolves
  (``experiments.set_norm_placement`` in prose after a rename is caught here, not by a reader);
* every "chapter NN" is a chapter of the book, and "the <topic> chapter" names a topic of a chapter's title.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import json
import pkgutil
import re
from pathlib import Path

import pytest

import transformer_lib

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
_spec = importlib.util.spec_from_file_location("code_map", ROOT / "tools" / "code_map.py")
CODE_MAP = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(CODE_MAP)  # the chapters' order and numbers (_toc.yml)
FRONT = sorted((ROOT / "book").glob("*.md"))


def _markdown(path: Path) -> list[str]:
    if path.suffix == ".md":
        return [path.read_text(encoding="utf-8")]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def _code(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _prose(text: str) -> str:
    """The text a reader reads as sentences: roles, code, math, links' targets and HTML comments removed."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", text)  # {cite:p}`key`, {glue:text}`x`, {doc}`...`
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " ", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return text


def _surnames() -> set[str]:
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    names = set()
    for authors in re.findall(r"author\s*=\s*\{(.*?)\},\n", bib, flags=re.S):
        for author in authors.split(" and "):
            surname = author.split(",")[0].strip(" {}")
            if surname and surname != "others":
                names.add(surname)
    return names


SOURCES = NOTEBOOKS + FRONT


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_citation_in_prose_is_a_cite_role(path):
    surnames = "|".join(sorted(map(re.escape, _surnames()), key=len, reverse=True))
    year_citation = re.compile(rf"\b({surnames})\b(?: and \w+)?(?: et al\.)?,? \(?(19|20)\d\d[ab]?\b")
    bad = []
    for text in _markdown(path):
        for line in _prose(text).splitlines():
            if "et al" in line or year_citation.search(line):
                bad.append(line.strip()[:120])
    assert not bad, (
        f"{path.name}: citations outside a {{cite}} role (write {{cite:p}}`key` or {{cite:t}}`key`):\n" + "\n".join(bad)
    )


def _library_modules() -> dict[str, str]:
    """Every module or package name under transformer_lib (the last part) -> its dotted path."""
    names = {"transformer_lib": "transformer_lib"}
    for info in pkgutil.walk_packages(transformer_lib.__path__, "transformer_lib."):
        names.setdefault(info.name.rsplit(".", 1)[1], info.name)
    return names


def _code_trees(path: Path) -> list[ast.Module]:
    """The syntax tree of each code cell that parses once its IPython magics (``%``, ``!`` lines) are left out."""
    trees = []
    for source in _code(path):
        source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            trees.append(ast.parse(source))
        except SyntaxError:
            continue
    return trees


def _bindings(path: Path) -> tuple[dict[str, str], set[str]]:
    """Names a notebook imports (name -> dotted path of what it is) and every other name its code binds."""
    imported, bound = {}, set()
    for tree in _code_trees(path):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    imported[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    imported[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
    return imported, bound


def _resolve(dotted: str):
    """Import the longest importable prefix of ``dotted`` and getattr the rest; raises when a part is missing."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            if isinstance(obj, type) and not hasattr(obj, part) and part in _instance_attributes(obj):
                return obj  # an attribute every instance gets in __init__ (nn.MultiheadAttention.in_proj_weight)
            obj = getattr(obj, part)
        return obj
    raise ImportError(dotted)


WELL_KNOWN = {
    "torch": "torch",
    "F": "torch.nn.functional",
    "nn": "torch.nn",
    "np": "numpy",
    "autograd": "torch.autograd",
    "tl": "triton.language",
}
OPTIONAL_PACKAGES = {"triton"}  # requirements-triton.txt: names in it resolve only where it is installed


def _instance_attributes(cls: type) -> set[str]:
    """Names ``__init__`` assigns or registers on ``self`` (attributes of instances, not of the class)."""
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    except (OSError, TypeError):
        return set()
    names = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }
    names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return names


# Backticked text that is not a Python name (a file name, a date format) or an attribute path of an object the
# prose describes rather than binds: (notebook, text) -> why it is exempt.
NOT_NAMES = {
    "d.m.yyyy": "a date format",
    "self.rope": "an attribute inside a class shown with show_source",
    "up.weight": "a submodule's weight inside a block (block.ffn.up.weight)",
    "ffn.up": "a submodule path inside a block (model.blocks[i].ffn.up)",
    "ffn.down": "a submodule path inside a block (model.blocks[i].ffn.down)",
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_library_name_in_prose_resolves(path):
    modules = _library_modules()
    imported, bound = _bindings(path)
    stale = []
    for text in _markdown(path):
        for name in re.findall(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`", text):
            head, rest = name.split(".", 1)
            if name in NOT_NAMES or name.endswith((".py", ".ipynb", ".json")):
                continue
            if head in WELL_KNOWN and head not in imported:
                target = f"{WELL_KNOWN[head]}.{rest}"
            elif head in imported:
                target = f"{imported[head]}.{rest}"
            elif head in modules:
                target = f"{modules[head]}.{rest}"
            elif hasattr(transformer_lib, head):  # a name the package exports (MultiHeadAttention.forward)
                target = f"transformer_lib.{name}"
            elif head in bound or hasattr(builtins, head):
                continue  # an object the notebook makes (model.forward, cache.update): its layout is its own
            else:
                stale.append(f"`{name}`: `{head}` is neither imported nor bound in {path.name}")
                continue
            if target.split(".")[0] in OPTIONAL_PACKAGES and importlib.util.find_spec(target.split(".")[0]) is None:
                continue
            try:
                _resolve(target)
            except (ImportError, AttributeError) as err:
                stale.append(f"`{name}` -> {target}: {err}")
    assert not stale, "names in prose that do not resolve:\n" + "\n".join(stale)


def _chapter_titles() -> dict[int, str]:
    titles = {}
    for number, nb in enumerate(CODE_MAP.notebooks(ROOT)):  # numbered by their order in _toc.yml
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        first = next("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        titles[number] = first.splitlines()[0].lstrip("# ").lower()
    return titles


# words that make "the <word> chapter" a reference by position, not by topic
POSITIONAL = {
    "next",
    "previous",
    "last",
    "first",
    "same",
    "following",
    "this",
    "that",
    "earlier",
    "later",
    "second",
    "third",
    "final",
    "present",
    "whole",
    "current",
}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_chapter_reference_names_a_chapter(path):
    titles = _chapter_titles()
    bad = []
    for text in _markdown(path):
        prose = _prose(text)
        for number in re.findall(r"\b[Cc]hapters? (\d{1,2})\b", prose):
            if int(number) not in titles:
                bad.append(f"chapter {number}: no such chapter")
        for topic in re.findall(r"\bthe ([\w-]+) chapter\b", prose):
            words = [w for w in re.split(r"[-\s]", topic.lower()) if w]
            if topic.lower() not in POSITIONAL and not all(any(w[:5] in t for t in titles.values()) for w in words):
                bad.append(f"'the {topic} chapter': no chapter's title is about {topic}")
    assert not bad, f"{path.name}:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_chapter_that_tests_the_source_articles_links_to_the_page_naming_them(path):
    text = "\n".join(_markdown(path))
    if re.search(r"\b(source )?articles?\b", _prose(text)) and "source article" in text.replace("\n", " "):
        assert "<../book/sources>`" in text, f"{path.name} speaks of the source articles without linking book/sources"


def _glued_as_text(path: Path) -> set[str]:
    """Keys a notebook glues as strings: ``glue_number(name, value, fmt)`` (formatted) and ``glue_choice``."""
    keys = set()
    for tree in _code_trees(path):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            formatted = len(node.args) > 2 or any(k.arg == "fmt" for k in node.keywords)
            if func == "glue_choice" or (func == "glue_number" and formatted):
                keys.add(node.args[0].value)
    return keys


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_key_glued_as_text_is_shown_without_a_format_spec(path):
    # myst-nb applies a role's spec (`key:,`) with format(): on a glued string that fails the build with
    # "Cannot specify ',' with 's'", and only `make book` would see it
    text_keys = _glued_as_text(path)
    roles = re.findall(r"\{glue(?::text)?\}`([A-Za-z_]\w*):([^`]+)`", "\n".join(_markdown(path)))
    bad = sorted({f"{k}:{spec}" for k, spec in roles if k in text_keys})
    assert not bad, f"{path.name}: keys glued as strings, written with a format spec: {bad}"


def _leaked_value(source: str) -> str | None:
    """What a visible cell's last line would print as a bare value (a glued number, a claim's None, a constant)."""
    tree = ast.parse(source)
    if source.rstrip().endswith(";") or not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return None
    value = tree.body[-1].value

    def book_call(node):
        func = getattr(node, "func", None)
        name = getattr(func, "id", None) or getattr(func, "attr", "")
        return isinstance(node, ast.Call) and name.startswith(("glue", "claim"))

    if book_call(value) or (isinstance(value, ast.Tuple) and any(book_call(e) for e in value.elts)):
        return ast.unparse(value)[:60]
    if isinstance(value, (ast.Constant, ast.BinOp, ast.Compare, ast.Subscript, ast.Attribute)):
        return ast.unparse(value)[:60]
    return None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_visible_cell_ends_in_a_stray_value(path):
    """A cell the page shows ends in an experiment, a table, a figure or a widget, never in a glued number or a
    bookkeeping call whose return value Jupyter would print (gluing belongs in remove-cell cells)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    leaks = [
        f"cell {c.get('id')}: {leak}"
        for c in cells
        if c["cell_type"] == "code" and "remove-cell" not in c.get("metadata", {}).get("tags", [])
        if (leak := _leaked_value("".join(c["source"])))
    ]
    assert not leaks, "\n".join(leaks)


def test_the_page_shows_the_experiment_not_the_bookkeeping():
    """Glue and claims live in remove-cell cells: across the book at most three visible cells may call them (to
    show the method itself once), so that the reader sees experiments, tables and figures."""
    shown = []
    for path in NOTEBOOKS:
        for c in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if c["cell_type"] != "code" or "remove-cell" in c.get("metadata", {}).get("tags", []):
                continue
            calls = [
                n
                for n in ast.walk(ast.parse("".join(c["source"])))
                if isinstance(n, ast.Call)
                and (getattr(n.func, "id", None) or getattr(n.func, "attr", "")).startswith(("glue", "claim"))
            ]
            if calls:
                shown.append(f"{path.name} cell {c.get('id')}: {ast.unparse(calls[0])[:60]}")
    assert len(shown) <= 3, f"{len(shown)} visible cells glue or claim; move it into a remove-cell cell:\n" + "\n".join(
        shown
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_glue_key_is_glued_twice_in_a_chapter(path):
    """myst-nb warns on a key glued twice in one document, and the book builds with -W: catch it in the fast loop.
    Keys written as string literals (``glue_number("n_test", ...)``) are checked; computed keys are not."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    seen = {}
    for c in cells:
        if c["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse("".join(c["source"]))):
            func = getattr(node, "func", None)
            name = getattr(func, "id", None) or getattr(func, "attr", "")
            if isinstance(node, ast.Call) and name.startswith("glue") and node.args:
                key = node.args[0]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    seen.setdefault(key.value, []).append(c.get("id"))
    twice = {k: ids for k, ids in seen.items() if len(ids) > 1}
    assert not twice, f"glued more than once: {twice}"

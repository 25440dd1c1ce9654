"""Where a chapter's code lives, derived from what the notebooks import: the README's table and the back-links.

A chapter's notebook imports its code from ``transformer_lib``; this tool reads those imports (with ``ast``, not by
running anything) and writes two things from them, so that neither can drift from the notebooks:

* the README's "Where a chapter's code lives" table (between ``<!-- BEGIN code -->`` and ``<!-- END code -->``):
  one row per notebook, its modules sorted into library modules, experiments, figures (``viz/``) and exercises;
* a ``Used in chapter NN.`` line in the docstring of every module a notebook uses (d2l's back-link), placed
  after the docstring's first paragraph; a module that no notebook uses carries no such line.

A module is *used* by a chapter when the notebook imports a name that the module defines, or imports the module
itself. Names are followed through re-exports: ``from transformer_lib.viz import show_source`` uses
``viz/source.py`` (``viz/__init__.py`` only re-exports it), ``import transformer_lib as tl`` and ``tl.GPT`` use
``models.py``, and ``from transformer_lib import quant as Q`` with ``Q.gptq_quantize`` uses ``quant/gptq.py``.
Package ``__init__`` files are never listed (they only gather names).

    python tools/code_map.py          # rewrite the README table and the docstrings that are out of date
    python tools/code_map.py --check  # exit 1 (listing them) if anything is out of date

``tools/sync_setup_cells.py`` runs the same ``sync`` after its own blocks, so one command regenerates everything.
"""

from __future__ import annotations

import ast
import re
import sys
from functools import lru_cache
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "transformer_lib"
README_PATH = "README.md"
BLOCK = "code"
COLUMNS = {"library modules": "", "experiments": "experiments/", "figures": "viz/", "exercises": "exercises/"}
BACKLINK = re.compile(r"^Used in chapters? \d\d(?:(?:, | and )\d\d)*\.$")


# ----------------------------------------------------------------------------- resolving names to modules
def module_file(dotted: str, root: Path = ROOT) -> Path | None:
    """The file of module ``dotted`` (``transformer_lib.viz.live``): ``.py`` or a package's ``__init__.py``."""
    base = root.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def is_package(dotted: str, root: Path = ROOT) -> bool:
    path = module_file(dotted, root)
    return path is not None and path.name == "__init__.py"


@lru_cache(maxsize=None)
def _reexports(dotted: str, root: Path) -> dict[str, tuple[str, str | None]]:
    """Names module ``dotted`` imports at its top level from the package: ``{name: (module, name or None)}``,
    ``None`` when the name is the module itself (``from . import x``)."""
    path = module_file(dotted, root)
    tree = ast.parse(path.read_text(), filename=str(path))
    package = dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]
    found: dict[str, tuple[str, str | None]] = {}
    statements = list(tree.body)
    while statements:  # the top level, and the branches of top-level if/try statements
        node = statements.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            statements[:0] = (
                node.body
                + node.orelse
                + getattr(node, "finalbody", [])
                + [s for h in getattr(node, "handlers", []) for s in h.body]
            )
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source != PACKAGE and not source.startswith(PACKAGE + "."):
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found[alias.asname or alias.name] = (sub, None) if module_file(sub, root) else (source, alias.name)
    return found


def resolve(dotted: str, name: str, root: Path = ROOT) -> tuple[str, bool]:
    """The module that defines ``name`` as seen from module ``dotted`` (following re-exports), and whether
    ``name`` is that module itself (``from transformer_lib.experiments import recall``) rather than one of its
    names."""
    for _ in range(20):  # re-export chains are short; a cycle would be a bug in the package
        sub = f"{dotted}.{name}"
        if module_file(sub, root):
            return sub, True
        target = _reexports(dotted, root).get(name)
        if target is None:
            return dotted, False
        dotted, name = target
        if name is None:
            return dotted, True
    raise ValueError(f"re-exports of {name!r} from {dotted} do not end")


# ----------------------------------------------------------------------------- what a notebook uses
def _code(nb) -> str:
    """The notebook's code cells as one Python source, IPython magics and shell lines blanked out."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines = [("" if line.lstrip().startswith(("%", "!")) else line) for line in cell.source.splitlines()]
        cells.append("\n".join(lines))
    return "\n\n".join(cells)


def used_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every ``transformer_lib`` module (dotted, no package ``__init__``) whose names the notebook imports."""
    tree = ast.parse(_code(nbformat.read(path, as_version=4)), filename=str(path))
    used, aliases = set(), {}  # aliases: a name bound to a module -> that module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    used.add(alias.name)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    elif alias.name == PACKAGE:
                        aliases[PACKAGE] = PACKAGE
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and node.module
            and (node.module == PACKAGE or node.module.startswith(PACKAGE + "."))
        ):
            for alias in node.names:
                module, itself = resolve(node.module, alias.name, root)
                used.add(module)
                if itself:
                    aliases[alias.asname or alias.name] = module
    for node in ast.walk(tree):  # attributes of a module alias: tl.GPT, Q.gptq_quantize
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            used.add(resolve(aliases[node.value.id], node.attr, root)[0])
    return {m for m in used if module_file(m, root) and not is_package(m, root)}


def notebooks(root: Path = ROOT) -> list[Path]:
    """The chapters' notebooks in reading order: the order of ``_toc.yml``, which numbers them (files carry slugs)."""
    found, entries = [], [yaml.safe_load((root / "_toc.yml").read_text())]
    while entries:
        entry = entries.pop(0)
        if isinstance(entry, list):
            entries[:0] = entry
        elif isinstance(entry, dict):
            if str(entry.get("file", "")).startswith("notebooks/"):
                found.append(root / f"{entry['file']}.ipynb")
            entries[:0] = [entry[k] for k in ("parts", "chapters", "sections") if k in entry]
    return found


def chapter_of(path: Path, root: Path = ROOT) -> str:
    """``07`` for ``notebooks/kv_cache.ipynb`` when it is the eighth chapter of ``_toc.yml`` (the first is 00)."""
    return f"{[p.name for p in notebooks(root)].index(path.name):02d}"


def code_map(root: Path = ROOT) -> dict[Path, set[str]]:
    """``{notebook: modules it uses}`` for every notebook."""
    return {path: used_modules(path, root) for path in notebooks(root)}


def chapters_by_module(root: Path = ROOT) -> dict[str, list[str]]:
    """``{module: sorted chapter numbers}`` for every module some notebook uses."""
    found: dict[str, set[str]] = {}
    for path, modules in code_map(root).items():
        for module in modules:
            found.setdefault(module, set()).add(chapter_of(path, root))
    return {m: sorted(c) for m, c in found.items()}


def relative(module: str) -> str:
    """``viz/live.py`` for ``transformer_lib.viz.live``."""
    return "/".join(module.split(".")[1:]) + ".py"


# ----------------------------------------------------------------------------- the README table
def readme_table(root: Path = ROOT) -> str:
    """The Markdown table: one row per notebook, its modules in four columns."""
    rows = ["| chapter | " + " | ".join(COLUMNS) + " |", "| --- " * (len(COLUMNS) + 1) + "|"]
    for path, modules in code_map(root).items():
        files = sorted(relative(m) for m in modules)
        cells = []
        for prefix in COLUMNS.values():
            if prefix:
                mine = [f for f in files if f.startswith(prefix)]
            else:  # library modules: everything not in one of the other folders
                mine = [f for f in files if not any(f.startswith(p) for p in COLUMNS.values() if p)]
            cells.append(", ".join(f"`{f}`" for f in mine))
        label = chapter_of(path, root) + " " + path.stem.replace("_", " ")
        rows.append(f"| [{label}](notebooks/{path.name}) | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def sync_readme(text: str, root: Path = ROOT) -> str:
    """``text`` (a README) with the code table between its markers replaced by the current one."""
    pattern = re.compile(rf"(<!-- BEGIN {BLOCK} [^\n]*-->\n)(?:.*?\n)?(<!-- END {BLOCK} -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"{README_PATH} lacks the markers <!-- BEGIN {BLOCK} ... --> / <!-- END {BLOCK} -->")
    table = readme_table(root)
    return pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)


# ----------------------------------------------------------------------------- the docstrings' back-links
def backlink(chapters: list[str]) -> str:
    """``Used in chapter 07.`` / ``Used in chapters 02, 03 and 07.``"""
    if len(chapters) == 1:
        return f"Used in chapter {chapters[0]}."
    return f"Used in chapters {', '.join(chapters[:-1])} and {chapters[-1]}."


def docstring_backlink(source: str) -> str | None:
    """The ``Used in chapter ...`` line of a module's docstring, or None."""
    doc = ast.get_docstring(ast.parse(source), clean=False) or ""
    found = [line for line in doc.splitlines() if BACKLINK.match(line)]
    return found[0] if found else None


def with_backlink(source: str, line: str | None) -> str:
    """``source`` (a module) whose docstring carries ``line`` after its first paragraph (none when None).

    Only the docstring's lines change: an old back-link (and the blank line that set it apart) is removed, then the
    new one is inserted after the first blank line of the docstring, or before its closing quotes when it has
    none (a one-paragraph docstring; its closing quotes move to a line of their own).
    """
    tree = ast.parse(source)
    first = tree.body[0] if tree.body else None
    if not (
        isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    ):
        raise ValueError("the module has no docstring to carry its 'Used in chapter' line")
    lines = source.splitlines(keepends=True)
    start, end = first.lineno - 1, first.end_lineno  # lines[start:end] hold the docstring
    doc = lines[start:end]
    old = next((i for i in range(1, len(doc) - 1) if BACKLINK.match(doc[i].strip())), None)
    if old is not None:
        if old + 1 < len(doc) - 1 and not doc[old + 1].strip():  # after the first paragraph: "", line, ""
            del doc[old : old + 2]
        elif not doc[old - 1].strip():  # before the closing quotes: "", line
            del doc[old - 1 : old + 1]
        else:
            del doc[old]
    if line is not None:
        blank = next((i for i in range(1, len(doc) - 1) if not doc[i].strip()), None)
        last = doc[-1]
        if blank is not None:
            doc[blank + 1 : blank + 1] = [line + "\n", "\n"]
        elif len(doc) > 1 and last.strip() in ('"""', "'''"):  # the closing quotes stand alone
            doc[-1:-1] = ["\n", line + "\n"]
        else:  # a one-paragraph docstring ending in text + quotes: the quotes move to a line of their own
            body, quote = last.rstrip()[:-3], last.rstrip()[-3:]
            doc[-1:] = [body + "\n", "\n", line + "\n", quote + last[len(last.rstrip()) :]]
    return "".join(lines[:start] + doc + lines[end:])


def module_sources(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package (dotted name -> file), package ``__init__`` files left out."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        if path.name != "__init__.py":
            found[".".join(path.relative_to(root).with_suffix("").parts)] = path
    return found


def expected_backlinks(root: Path = ROOT) -> dict[str, str | None]:
    """``{module: its 'Used in chapter' line, or None}`` for every module of the package."""
    chapters = chapters_by_module(root)
    return {m: backlink(chapters[m]) if m in chapters else None for m in module_sources(root)}


# ----------------------------------------------------------------------------- writing
def sync(root: Path = ROOT, check: bool = False) -> list[Path]:
    """Bring the README table and every module's back-link up to date (only list them with ``check``); return the
    files that were out of date, relative to ``root``."""
    stale = []
    readme = root / README_PATH
    text = readme.read_text()
    if sync_readme(text, root) != text:
        stale.append(Path(README_PATH))
        if not check:
            readme.write_text(sync_readme(text, root))
    sources = module_sources(root)
    for module, line in expected_backlinks(root).items():
        path = sources[module]
        source = path.read_text()
        new = with_backlink(source, line)
        if new != source:
            stale.append(path.relative_to(root))
            if not check:
                path.write_text(new)
    return stale


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = sync(ROOT, check)
    if check and stale:
        print("out of date (run: python tools/code_map.py):", *stale, sep="\n  ")
        return 1
    if not check:
        print(f"updated {len(stale)} file(s)", *stale, sep="\n  " if stale else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The fast loop's memory: a notebook that passed, and whose inputs have not changed since, is not executed again.

``make test`` passes ``--skip-passed-notebooks``. Each notebook gets a key, a SHA-256 of what its run depends on:

* the notebook's own bytes;
* every module of ``transformer_lib`` it can import: the modules its code cells import, then everything those import
  (read with ``ast``, imports inside functions included, each package's ``__init__.py`` on the way), and every data
  file under ``transformer_lib`` (checkpoints, records);
* the test set-up (``requirements*.txt``, ``pyproject.toml``, the conftests, ``notebook_budget.py``, this file),
  the claims mode (``BOOK_CLAIMS``), Python's and torch's versions.

After a session, every notebook whose items all passed (and which stayed within its budget) has its key written to
``RECORD`` (``_build/passed-notebooks.json``, in this checkout only: ``make clean`` forgets it). In the next session
a notebook whose key is in the record is skipped with one line saying so; change the notebook, a module it imports,
the set-up or the mode, and it runs again. ``make test-all``, ``make book`` and CI do not pass the option: they
execute every notebook.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import time
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "transformer_lib"
RECORD = ROOT / "_build" / "passed-notebooks.json"
SETUP_FILES = (
    "pyproject.toml",
    "requirements.txt",
    "requirements-nodeps.txt",
    "requirements-bench.txt",
    "requirements-triton.txt",
    "notebooks/conftest.py",
    "tests/conftest.py",
    "tests/notebook_budget.py",
    "tests/notebook_record.py",
)
OPTION = "--skip-passed-notebooks"


def _module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file of module ``name`` (``transformer_lib.blocks.attention``), a package's ``__init__.py``, or None."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The ``transformer_lib`` module names ``tree`` (the code of ``module``) imports, anywhere in it; ``from p import
    x`` names both ``p`` and ``p.x`` (``x`` may be a submodule)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up node.level - 1 more
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return {n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}


@lru_cache(maxsize=None)
def _imports_of(path: Path, module: str) -> frozenset[str]:
    """``_imported_names`` of one library file (read once per session: every notebook's closure shares them)."""
    return frozenset(_imported_names(ast.parse(path.read_text()), module, path.name == "__init__.py"))


def import_closure(sources: list[str], root: Path = ROOT) -> set[Path]:
    """The files of every ``transformer_lib`` module that code ``sources`` can import, directly or through others,
    with the ``__init__.py`` of every package on the way."""
    todo = set().union(*(_imported_names(ast.parse(s), "__main__", False) for s in sources)) if sources else set()
    seen: set[str] = set()
    files: set[Path] = set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            prefix = ".".join(parts[:i])
            if prefix in seen:
                continue
            seen.add(prefix)
            path = _module_file(prefix, root)
            if path is None:  # a function or class imported from a module, not a module
                continue
            files.add(path)
            todo |= _imports_of(path, prefix)
    return files


def _code_cells(notebook: Path) -> list[str]:
    """The code cells' sources, IPython magics and shell lines left out (not Python)."""
    cells = json.loads(notebook.read_text())["cells"]
    sources = []
    for cell in cells:
        if cell["cell_type"] == "code":
            text = "".join(cell["source"])
            sources.append("\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("%", "!"))))
    return [s for s in sources if _parses(s)]


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def notebook_key(notebook: Path, root: Path = ROOT) -> str:
    """The SHA-256 of everything ``notebook``'s run depends on (the module docstring lists it)."""
    import torch  # the tests import it anyway; here only for its version

    data_files = [p for p in (root / PACKAGE).rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")]
    files = sorted(import_closure(_code_cells(notebook), root) | set(data_files))
    files += [root / name for name in SETUP_FILES if (root / name).is_file()]
    digest = hashlib.sha256(notebook.read_bytes())
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + _file_digest(path) + b"\0")
    facts = {"claims": os.environ.get("BOOK_CLAIMS"), "python": platform.python_version(), "torch": torch.__version__}
    digest.update(json.dumps(facts, sort_keys=True).encode())
    return digest.hexdigest()


@lru_cache(maxsize=None)
def _file_digest(path: Path) -> bytes:
    """One file's SHA-256 (read once per session: the notebooks share most of their files)."""
    return hashlib.sha256(path.read_bytes()).digest()


def read_record(path: Path = RECORD) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _notebook_of(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    return path if path.endswith(".ipynb") else None


class PassedNotebooks:
    """A pytest plugin: skips the notebooks whose key is in the record, and records those that passed.

    Skipping happens where items are collected (each xdist worker); recording where reports arrive (the controller),
    after the session, for notebooks all of whose reports passed and whose budget plugin found them within budget."""

    def __init__(self, root: Path = ROOT, record: Path = RECORD, budget=None):
        self.root, self.record, self.budget = root, record, budget
        self.keys: dict[str, str] = {}
        self.failed: set[str] = set()
        self.ran: set[str] = set()

    def pytest_sessionstart(self, session):
        """Every notebook's key as its inputs are now, before any runs (an edit during the session makes it rerun)."""
        for path in sorted((self.root / "notebooks").glob("*.ipynb")):
            self.keys[path.relative_to(self.root).as_posix()] = notebook_key(path, self.root)

    def key(self, nodepath: str) -> str | None:
        return self.keys.get(nodepath)

    def pytest_collection_modifyitems(self, config, items):
        record = read_record(self.record)
        for item in items:
            nodepath = _notebook_of(item.nodeid)
            if nodepath is None or nodepath not in record or record[nodepath]["key"] != self.key(nodepath):
                continue
            when = record[nodepath]["passed"]
            item.add_marker(pytest.mark.skip(reason=f"unchanged since it passed on {when} ({OPTION})"))

    def pytest_runtest_logreport(self, report):
        nodepath = _notebook_of(report.nodeid)
        if nodepath is None or report.skipped:
            return
        self.ran.add(nodepath)
        if report.failed:
            self.failed.add(nodepath)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if hasattr(session.config, "workerinput"):  # an xdist worker: the controller records
            return
        over = set(self.budget.over_budget()) if self.budget is not None else set()
        passed = {nb for nb in self.ran - self.failed - over if self.key(nb) is not None}
        if not passed:
            return
        record = read_record(self.record)
        stamp = time.strftime("%Y-%m-%d %H:%M")
        record.update({nb: {"key": self.key(nb), "passed": stamp} for nb in sorted(passed)})
        self.record.parent.mkdir(parents=True, exist_ok=True)
        self.record.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")

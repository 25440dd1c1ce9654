"""The fast loop's record of passed notebooks (``notebook_record.py``): a notebook's key changes with exactly what its
run depends on, and the plugin skips only notebooks recorded with their current key."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from notebook_record import PassedNotebooks, import_closure, notebook_key, read_record


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _notebook(path: Path, *cells: str) -> Path:
    nb = {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells]}
    return _write(path, json.dumps(nb))


@pytest.fixture
def project(tmp_path):
    """A package with a chain a -> b (relative import inside a function), an unrelated c, and a data file."""
    lib = tmp_path / "transformer_lib"
    _write(lib / "__init__.py", "")
    _write(lib / "blocks" / "__init__.py", "")
    _write(lib / "blocks" / "a.py", "def f():\n    from .b import g\n    return g()\n")
    _write(lib / "blocks" / "b.py", "def g():\n    return 1\n")
    _write(lib / "blocks" / "c.py", "X = 1\n")
    _write(lib / "checkpoints" / "w.json", "{}")
    _notebook(tmp_path / "notebooks" / "one.ipynb", "%matplotlib inline\nfrom transformer_lib.blocks import a\n")
    return tmp_path


def test_the_closure_follows_imports_into_functions_and_packages(project):
    files = import_closure(["from transformer_lib.blocks import a"], project)
    names = {p.relative_to(project).as_posix() for p in files}
    assert names == {
        "transformer_lib/__init__.py",
        "transformer_lib/blocks/__init__.py",
        "transformer_lib/blocks/a.py",
        "transformer_lib/blocks/b.py",
    }


def test_the_key_changes_with_what_the_notebook_imports_and_only_that(project):
    nb = project / "notebooks" / "one.ipynb"
    key = notebook_key(nb, project)
    assert notebook_key(nb, project) == key
    _write(project / "transformer_lib" / "blocks" / "c.py", "X = 2\n")  # not imported
    assert notebook_key(nb, project) == key
    import notebook_record

    notebook_record._file_digest.cache_clear()
    notebook_record._imports_of.cache_clear()
    _write(project / "transformer_lib" / "blocks" / "b.py", "def g():\n    return 2\n")  # imported through a
    assert notebook_key(nb, project) != key
    key = notebook_key(nb, project)
    _notebook(nb, "from transformer_lib.blocks import a\nprint(1)\n")  # the notebook itself
    assert notebook_key(nb, project) != key


def _item(nodeid):
    marks = []
    return SimpleNamespace(nodeid=nodeid, add_marker=marks.append, marks=marks)


def _report(nodeid, outcome):
    return SimpleNamespace(nodeid=nodeid, skipped=outcome == "skipped", failed=outcome == "failed")


def test_a_passed_notebook_is_recorded_and_then_skipped_until_it_changes(project):
    record = project / "_build" / "passed-notebooks.json"
    _notebook(project / "notebooks" / "two.ipynb", "import transformer_lib.blocks.c\n")
    first = PassedNotebooks(root=project, record=record)
    first.pytest_sessionstart(None)
    for nodeid, outcome in [("notebooks/one.ipynb::Cell 0", "passed"), ("notebooks/two.ipynb::Cell 0", "failed")]:
        first.pytest_runtest_logreport(_report(nodeid, outcome))
    first.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
    assert set(read_record(record)) == {"notebooks/one.ipynb"}  # the failed one is not recorded

    second = PassedNotebooks(root=project, record=record)
    second.pytest_sessionstart(None)
    items = [_item("notebooks/one.ipynb::Cell 0"), _item("notebooks/two.ipynb::Cell 0"), _item("tests/t.py::test")]
    second.pytest_collection_modifyitems(None, items)
    assert [len(i.marks) for i in items] == [1, 0, 0]
    assert "unchanged since it passed" in items[0].marks[0].kwargs["reason"]

    _notebook(project / "notebooks" / "one.ipynb", "from transformer_lib.blocks import a\nprint(2)\n")
    third = PassedNotebooks(root=project, record=record)
    third.pytest_sessionstart(None)
    items = [_item("notebooks/one.ipynb::Cell 0")]
    third.pytest_collection_modifyitems(None, items)
    assert items[0].marks == []  # edited: it runs again


def test_a_notebook_over_its_budget_is_not_recorded(project):
    record = project / "_build" / "passed-notebooks.json"
    budget = SimpleNamespace(over_budget=lambda: {"notebooks/one.ipynb": 1000.0})
    plugin = PassedNotebooks(root=project, record=record, budget=budget)
    plugin.pytest_sessionstart(None)
    plugin.pytest_runtest_logreport(_report("notebooks/one.ipynb::Cell 0", "passed"))
    plugin.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
    assert read_record(record) == {}

"""Where a chapter's code lives: the README's table, the modules' "Used in chapter" lines and the notebooks agree.

``tools/code_map.py`` derives both from the notebooks' imports by reading them with ``ast``. The independent
reference here is Python itself: each notebook's import statements are executed and every imported object asked
for its module (``inspect.getmodule``), attributes of imported modules (``tl.GPT``) included. The issue that asked
for the table also named modules the hand-written table had lost; they are checked by name.
"""

import ast
import importlib.util
import inspect
import re
import types
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


code_map = _load("code_map")
NOTEBOOKS = code_map.notebooks(ROOT)


def test_the_readme_table_is_what_the_notebooks_import():
    text = (ROOT / "README.md").read_text()
    assert code_map.sync_readme(text, ROOT) == text, "README.md's code table is stale; run tools/sync_setup_cells.py"


def test_every_module_docstring_carries_the_chapters_that_use_it_and_no_other_does():
    wrong = {}
    for module, line in code_map.expected_backlinks(ROOT).items():
        source = code_map.module_sources(ROOT)[module].read_text()
        if code_map.docstring_backlink(source) != line:
            wrong[module] = (code_map.docstring_backlink(source), line)
    assert wrong == {}, f"(found, expected) back-links; run tools/sync_setup_cells.py: {wrong}"


def test_the_tool_has_nothing_left_to_write():
    assert code_map.sync(ROOT, check=True) == []


OPTIONAL_PACKAGES = {"triton"}  # requirements-triton.txt: not installed everywhere (no macOS wheel)


def _runtime_modules(path: Path) -> set[str]:
    """Run the notebook's ``transformer_lib`` imports and ask each imported object (and each attribute the
    notebook reads from an imported module) which module defines it."""
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(
        line
        for c in nb.cells
        if c.cell_type == "code"
        for line in c.source.splitlines()
        if not line.lstrip().startswith(("%", "!"))
    )
    tree = ast.parse(source)
    namespace: dict = {}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and "transformer_lib" in ast.unparse(node):
            try:
                exec(ast.unparse(node), namespace)
            except ModuleNotFoundError as err:  # a module that needs an optional package (Triton: chapter 10)
                if err.name not in OPTIONAL_PACKAGES:
                    raise
                found |= {f"{node.module}.{a.name}" if isinstance(node, ast.ImportFrom) else a.name for a in node.names}

    def add(obj):
        module = obj if isinstance(obj, types.ModuleType) else inspect.getmodule(obj)
        assert module is not None, f"{path.name}: cannot tell where {obj!r} is defined"
        if module.__name__.startswith("transformer_lib") and not module.__file__.endswith("__init__.py"):
            found.add(module.__name__)

    for name, obj in namespace.items():
        if name != "__builtins__" and not isinstance(obj, (int, float, str, tuple, dict, list)):  # data: no module
            add(obj)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and isinstance(namespace.get(node.value.id), types.ModuleType)
        ):
            attr = getattr(namespace[node.value.id], node.attr, None)
            if attr is not None and not isinstance(attr, (int, float, str, tuple, dict, list)):
                add(attr)
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_map_is_what_python_finds_when_it_runs_the_imports(path):
    assert code_map.used_modules(path, ROOT) == _runtime_modules(path)


def test_the_modules_the_hand_written_table_had_lost_are_listed():
    rows = {line.split("|")[1].strip(): line for line in code_map.readme_table(ROOT).splitlines()[2:]}
    chapter = {re.search(r"\(notebooks/(\w+)\.ipynb\)", k).group(1): row for k, row in rows.items()}
    for slug, module in [
        ("rnn_limits", "experiments/training_step_cost.py"),
        ("attention", "experiments/score_scale.py"),
        ("multi_head_attention", "experiments/head_batching.py"),
        ("multi_head_attention", "experiments/head_count.py"),
        ("encoder_decoder", "experiments/causal_leak.py"),
        ("encoder_decoder", "experiments/param_shares.py"),
        ("pruning", "experiments/minilm_pruning.py"),
        ("kv_cache", "serving/paged_cache.py"),
        ("quantization", "quant/gptq.py"),
    ]:
        assert f"`{module}`" in chapter[slug], (slug, module)


def test_experiments_package_lists_every_experiment_with_the_chapters_that_import_it():
    import transformer_lib.experiments as experiments

    rows = re.findall(r"^\| ([\d, ]+|none) \| ``(\w+)`` \| .+ \|$", experiments.__doc__, re.M)
    listed = {module: chapters for chapters, module in rows}
    files = {p.stem for p in (ROOT / "transformer_lib" / "experiments").glob("*.py") if p.stem != "__init__"}
    assert sorted(listed) == sorted(files) and len(rows) == len(files)
    used = code_map.chapters_by_module(ROOT)
    for module, chapters in listed.items():
        want = used.get(f"transformer_lib.experiments.{module}")
        assert (chapters.split(", ") if chapters != "none" else None) == want, module


# ----------------------------------------------------------------------------- the docstring editing itself
MULTI = '"""Summary line.\n\nMore text.\n"""\nimport os\n'
ONE_LINE = '"""Summary line."""\nimport os\n'
ONE_PARAGRAPH = '"""Summary line\nthat goes on."""\nx = 1\n'
QUOTES_ALONE = '"""Summary line\nthat goes on.\n"""\nx = 1\n'


@pytest.mark.parametrize("source", [MULTI, ONE_LINE, ONE_PARAGRAPH, QUOTES_ALONE])
def test_a_backlink_is_added_once_changed_in_place_and_removed(source):
    one = code_map.with_backlink(source, "Used in chapter 07.")
    assert code_map.docstring_backlink(one) == "Used in chapter 07."
    assert code_map.with_backlink(one, "Used in chapter 07.") == one  # idempotent
    both = code_map.with_backlink(one, "Used in chapters 02 and 07.")
    assert code_map.docstring_backlink(both) == "Used in chapters 02 and 07." and both.count("Used in") == 1
    gone = code_map.with_backlink(both, None)
    assert code_map.docstring_backlink(gone) is None and "Used in" not in gone
    assert ast.get_docstring(ast.parse(gone)).startswith("Summary line")
    assert ast.dump(ast.parse(one).body[1]) == ast.dump(ast.parse(source).body[1])  # the code is untouched
    if source in (MULTI, QUOTES_ALONE):
        assert gone == source  # where the closing quotes stood alone, removing restores the file exactly


def test_the_backlink_follows_the_first_paragraph():
    assert (
        code_map.with_backlink(MULTI, "Used in chapter 01.")
        == '"""Summary line.\n\nUsed in chapter 01.\n\nMore text.\n"""\nimport os\n'
    )
    assert code_map.backlink(["02", "03", "07"]) == "Used in chapters 02, 03 and 07."

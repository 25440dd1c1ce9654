"""The package's shape, read from its source (``ast``, nothing imported): imports point only downward through
the declared layers and never form a cycle, and no module imports another module's private ``_name``."""

from __future__ import annotations

import ast
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[1] / "transformer_lib"

# The layers, lowest first, each a list of folders of the package (a module is in the layer of its folder). A module
# may import modules of its own layer or of a lower one, never of a higher one. The root holds only the package's
# face, ``transformer_lib/__init__.py`` (listed as ""), which re-exports the model pieces and models.
LAYERS = {
    "helpers and data files": ["utils", "checkpoints"],
    "data": ["data"],
    "model pieces": ["blocks", "kernels"],
    "whole models": ["models"],
    "the package's face": [""],
    "serving": ["serving"],  # generation, the KV caches, encoder-decoder decoding
    "quantization": ["quant"],
    "training": ["training"],  # the training loop, the losses, LoRA and QLoRA (over quant's NF4)
    "compression and analysis": ["compression", "analysis"],
    "the book's trained models": ["book_models"],
    "the book's machinery": ["book_tools"],  # claims, glue, timing: only experiments and exercises use it
    "experiments": ["experiments"],
    "figures": ["viz"],
    "exercises": ["exercises"],
}


def module_name(path: Path) -> str:
    """``transformer_lib/viz/plots.py`` -> ``"viz.plots"``; a package's ``__init__.py`` -> the package's name."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(name: str) -> int:
    """The rank of module ``name``'s layer: the layer that lists its top folder (the face, ``""``, is its own)."""
    for rank, folders in enumerate(LAYERS.values()):
        if name.split(".")[0] in folders:
            return rank
    raise KeyError(name)


def resolve(importer: str, node: ast.ImportFrom | ast.Import) -> list[tuple[str, list[str]]]:
    """The package modules an import statement reads, each with the names it takes from it."""
    if isinstance(node, ast.Import):
        out = []
        for alias in node.names:
            if alias.name == "transformer_lib" or alias.name.startswith("transformer_lib."):
                out.append((alias.name.removeprefix("transformer_lib").lstrip("."), []))
        return out
    if node.level == 0:
        if node.module != "transformer_lib" and not (node.module or "").startswith("transformer_lib."):
            return []
        base = node.module.removeprefix("transformer_lib").lstrip(".")
    else:
        is_package = MODULES[importer].name == "__init__.py"
        parts = importer.split(".") if importer else []
        parts = parts if is_package else parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    out, names = [], []
    for alias in node.names:  # `from . import x` where x is a module reads that module
        sub = f"{base}.{alias.name}" if base else alias.name
        if sub in MODULES:
            out.append((sub, []))
        else:
            names.append(alias.name)
    if names or not out:
        out.append((base, names))
    return out


def imports_of(name: str) -> list[tuple[str, list[str], int]]:
    """``[(imported module, names taken, line)]`` of every package import in module ``name``, in functions too."""
    tree = ast.parse(MODULES[name].read_text(), filename=str(MODULES[name]))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target, names in resolve(name, node):
                found.append((target, names, node.lineno))
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def test_every_module_has_a_declared_layer():
    missing = []
    for name in MODULES:
        try:
            layer_of(name)
        except KeyError:
            missing.append(name or "transformer_lib")
    assert not missing, f"modules at the root or in a folder LAYERS does not list (tests/test_structure.py): {missing}"


def test_the_root_holds_only_the_face_and_packages():
    loose = sorted(p.name for p in PACKAGE.iterdir() if p.is_file() and p.name != "__init__.py")
    bare = sorted(
        p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__" and not (p / "__init__.py").exists()
    )
    assert not loose, f"the root of transformer_lib/ keeps only __init__.py; move these into a package: {loose}"
    assert not bare, f"every folder of transformer_lib/ is a package (an __init__.py saying what it holds): {bare}"


def test_every_folder_of_the_package_is_in_one_layer():
    folders = [f for fs in LAYERS.values() for f in fs]
    top = {name.split(".")[0] for name in MODULES}
    assert len(folders) == len(set(folders)), "a folder is listed in two layers"
    assert set(folders) == top, f"LAYERS lists {sorted(set(folders) - top)}; unlisted: {sorted(top - set(folders))}"


def test_every_import_resolves_to_a_module_of_the_package():
    unknown = [
        f"{name or 'transformer_lib'}:{line} imports {target!r}"
        for name, edges in GRAPH.items()
        for target, _, line in edges
        if target not in MODULES
    ]
    assert not unknown, unknown


def upward_imports(graph) -> list[str]:
    """One message per import of a module in a higher layer, naming both modules and their layers."""
    names, upward = list(LAYERS), []
    for name, edges in graph.items():
        for target, _, line in edges:
            if layer_of(target) > layer_of(name):
                upward.append(
                    f"transformer_lib.{name}:{line} ({names[layer_of(name)]}) imports "
                    f"transformer_lib.{target} ({names[layer_of(target)]}), a higher layer"
                )
    return upward


def find_cycle(graph) -> list[str] | None:
    """A cycle of imports as ``[a, b, ..., a]``, or None."""
    state, stack = {}, []  # state: 1 = on the current path, 2 = done

    def visit(name):
        state[name] = 1
        stack.append(name)
        for target, _, _ in graph[name]:
            if target == name or target not in graph:
                continue
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[name] = 2
        return None

    for name in graph:
        if name not in state and (cycle := visit(name)):
            return cycle
    return None


def test_imports_point_only_downward():
    upward = upward_imports(GRAPH)
    assert not upward, "\n".join(upward)


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(f"transformer_lib.{m}" for m in cycle)


def private_imports(graph, trees) -> list[str]:
    """``from module import _name`` and ``module._name`` where ``module`` is another module of the package."""
    found = []
    for name, edges in graph.items():
        for target, taken, line in edges:
            found += [
                f"transformer_lib.{name}:{line} imports {n} from transformer_lib.{target}"
                for n in taken
                if n.startswith("_") and not n.startswith("__") and target != name
            ]
    for name, tree in trees.items():
        modules = {}  # local name -> package module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) or isinstance(node, ast.Import):
                for (target, taken), alias in zip(resolve(name, node), node.names):
                    if not taken and target in MODULES:
                        modules[alias.asname or alias.name.split(".")[-1]] = target
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and modules[node.value.id] != name
            ):
                found.append(
                    f"transformer_lib.{name}:{node.lineno} uses {node.value.id}.{node.attr} "
                    f"(transformer_lib.{modules[node.value.id]})"
                )
    return found


def _part(prefix: str, inside: bool):
    keep = [n for n in MODULES if n.startswith(prefix) == inside]
    return ({n: GRAPH[n] for n in keep}, {n: ast.parse(MODULES[n].read_text()) for n in keep})


def test_no_module_imports_another_modules_private_name():
    found = private_imports(*_part("exercises", inside=False))
    assert not found, "\n".join(found)


def test_no_exercise_module_imports_another_modules_private_name():
    found = private_imports(*_part("exercises", inside=True))
    assert not found, "\n".join(found)


def test_no_module_is_much_longer_than_400_lines():
    long = {
        name or "transformer_lib": n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > 420
    }
    assert not long, f"modules over ~400 lines hold two concepts; split them: {long}"


# A concept that spans several modules is a package whose __init__ is its face: every public name of its modules,
# gathered in __all__, except the argument checks listed here (they guard the functions, they are not tools).
FACES = {"quant": {"check_bits", "check_channel_scale"}, "serving": set(), "book_models": set()}


def public_names(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level (functions, classes, assigned constants) without a leading ``_``."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def face_problems(package: str, trees: dict[str, ast.Module], exempt: set[str]) -> list[str]:
    """What a package's face (``trees[package]``, its __init__) misses or gets wrong, given its modules' trees."""
    face = trees[package]
    listed = next(
        (
            ast.literal_eval(n.value)
            for n in face.body
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
        ),
        None,
    )
    if listed is None:
        return [f"transformer_lib.{package} has no __all__"]
    imported = {a.asname or a.name for n in face.body if isinstance(n, ast.ImportFrom) for a in n.names}
    problems = [
        f"transformer_lib.{package}.__all__ lists {n!r}, which it does not import" for n in listed if n not in imported
    ]
    submodules = {name.rsplit(".", 1)[1] for name in trees if name != package}
    for name, tree in trees.items():
        if name != package:
            problems += [
                f"transformer_lib.{package} does not export {n!r} of transformer_lib.{name}"
                for n in sorted(public_names(tree) - exempt - set(listed))
            ]
    problems += [
        f"transformer_lib.{package}.{n} is both a module and a name its face exports: one name, one thing"
        for n in sorted(submodules & set(listed))
    ]
    return problems


def test_each_package_face_exports_every_public_name_of_its_modules():
    problems = []
    for package, exempt in FACES.items():
        trees = {n: ast.parse(MODULES[n].read_text()) for n in MODULES if n == package or n.startswith(package + ".")}
        problems += face_problems(package, trees, exempt)
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- the checker itself
def test_resolve_reads_relative_and_absolute_imports():
    def edges(source, importer="experiments.recall"):
        node = ast.parse(source).body[0]
        return resolve(importer, node)

    assert edges("from ..training.loop import train") == [("training.loop", ["train"])]
    assert edges("from .mask_fill import apply_fill") == [("experiments.mask_fill", ["apply_fill"])]
    assert edges("from ..compression import pruning as P") == [("compression.pruning", [])]
    assert edges("from transformer_lib.book_tools.timing import _x") == [("book_tools.timing", ["_x"])]
    assert edges("import transformer_lib.models.transformer") == [("models.transformer", [])]
    assert edges("from . import checking", importer="exercises") == [("exercises.checking", [])]


def test_the_checks_report_an_upward_import_a_cycle_and_a_private_name():
    graph = {
        "training.loop": [("compression.pruning", ["head_mask"], 7)],
        "compression.pruning": [("utils.device", [], 3)],
        "utils.device": [],
    }
    (message,) = upward_imports(graph)
    assert message == (
        "transformer_lib.training.loop:7 (training) imports "
        "transformer_lib.compression.pruning (compression and analysis), a higher layer"
    )
    assert upward_imports({"compression.pruning": [("training.loop", [], 1)], "training.loop": []}) == []
    cycle = {"data.corpus": [("data.dates", [], 1)], "data.dates": [("data.corpus", [], 2)]}
    assert find_cycle(cycle) == ["data.corpus", "data.dates", "data.corpus"]
    assert find_cycle(graph) is None
    trees = {"compression.pruning": ast.parse("from ..training import loop as T\nT._to(1)\n")}
    edges = {"compression.pruning": [("book_tools.timing", ["_sync"], 1)]}
    assert private_imports(edges, trees) == [
        "transformer_lib.compression.pruning:1 imports _sync from transformer_lib.book_tools.timing",
        "transformer_lib.compression.pruning:2 uses T._to (transformer_lib.training.loop)",
    ]


def test_the_face_check_reports_a_missing_name_and_a_module_shadowed_by_a_name():
    trees = {
        "serving": ast.parse(
            'from .serving.generation import generate, decode_step\n__all__ = ["generate", "decode_step"]'
        ),
        "serving.generate": ast.parse(
            "def generate(): ...\ndef decode_step(): ...\ndef filter_logits(): ...\ndef _private(): ...\nCACHES = ()\n"
        ),
    }
    assert face_problems("serving", trees, exempt={"CACHES"}) == [
        "transformer_lib.serving does not export 'filter_logits' of transformer_lib.serving.generate",
        "transformer_lib.serving.generate is both a module and a name its face exports: one name, one thing",
    ]

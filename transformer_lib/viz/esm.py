"""The live figures' JavaScript as ES modules: read each file's imports and exports, and link a figure's module
graph into the one module text anywidget loads.

Every file in ``viz/js/`` is a real ES module: it imports what it uses (``import { softmax } from
"./common.js";``) and exports what others may use, and a browser loads it as it is. anywidget receives one
module text per widget (``_esm``) and imports it from a Blob URL, against which a relative import cannot
resolve. ``bundle`` links the graph here instead of in a build tool: each imported file becomes a function
scope of its own that runs once and returns its exports, and each ``import { a, b as c } from "./f.js"``
becomes ``const { a, b: c }`` of that scope (what a bundler such as esbuild does). The same text then works
in Jupyter, VS Code, Colab and the static book, offline, with nothing installed from npm.

Only the module syntax the figures use is read: one ``import { ... } from "./file.js";`` per statement at
the top level, exports by declaration (``export function f``, ``export const x``) and one default export
in the figure's own file. Anything else is refused with the file named (the tests also load every file
natively and compare the exports a browser sees with ``module_exports``).
"""

from __future__ import annotations

import re
from pathlib import Path

JS_DIR = Path(__file__).with_name("js")

# The module syntax ``bundle`` links (anything else that imports or exports is refused, naming the file):
_IMPORT = re.compile(r'^import\s*\{([^}]*)\}\s*from\s*"(\./[\w-]+\.js)";[ \t]*$', re.M)
_EXPORT_DECL = re.compile(r"^export\s+(?=(?:async\s+)?(?:function\*?|const|let|class)\s)", re.M)
_EXPORT_NAME = re.compile(r"^export\s+(?:async\s+)?(?:function\*?|const|let|class)\s+([A-Za-z_$][\w$]*)", re.M)
_EXPORT_DEFAULT = re.compile(r"^export\s+default\b", re.M)
_IDENT = re.compile(r"^[A-Za-z_$][\w$]*$")


def _strip_comments(src: str) -> str:
    """``src`` with ``//`` line comments blanked (the modules use no block comments or ``//`` inside strings
    at the start of a statement; enough to find import and export statements)."""
    return re.sub(r"^\s*//.*$", "", src, flags=re.M)


def module_imports(script: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """``[(file, [(imported, local), ...]), ...]`` of ``js/<script>``'s ``import { ... } from "./file.js"``."""
    src = _strip_comments((JS_DIR / script).read_text())
    found = []
    for names, spec in _IMPORT.findall(src):
        pairs = []
        for part in filter(None, (p.strip() for p in names.split(","))):
            imported, _, local = (w.strip() for w in part.partition(" as "))
            local = local or imported
            if not (_IDENT.match(imported) and _IDENT.match(local)):
                raise ValueError(f"js/{script}: cannot read the import of {part!r} from {spec!r}")
            pairs.append((imported, local))
        found.append((spec[2:], pairs))
    n_imports = len(re.findall(r"^\s*import\b", src, re.M))
    if n_imports != len(found):
        raise ValueError(
            f'js/{script}: every import must read `import {{ a, b as c }} from "./file.js";` at the '
            f"top level ({n_imports} import statements, {len(found)} of that form)"
        )
    return found


def module_exports(script: str) -> list[str]:
    """The names ``js/<script>`` exports by declaration (``export function f``, ``export const x``), in order;
    ``"default"`` last when it has a default export."""
    src = _strip_comments((JS_DIR / script).read_text())
    names = _EXPORT_NAME.findall(src)
    others = len(re.findall(r"^\s*export\b", src, re.M)) - len(names) - len(_EXPORT_DEFAULT.findall(src))
    if others:
        raise ValueError(
            f"js/{script}: export only declarations (`export function f`, `export const x = ...`) "
            f"or a default; {others} other export statement(s) found"
        )
    return names + (["default"] if _EXPORT_DEFAULT.search(src) else [])


def _link_order(script: str, seen: tuple[str, ...] = ()) -> list[str]:
    """The files ``script`` imports, directly or not, each after the files it imports (no cycles allowed)."""
    order = []
    for dep, _ in module_imports(script):
        if dep in seen + (script,):
            raise ValueError(f"js/{script}: import cycle through {' -> '.join(seen + (script, dep))}")
        for f in _link_order(dep, seen + (script,)) + [dep]:
            if f not in order:
                order.append(f)
    return order


def _linked_imports(script: str, src: str) -> str:
    """``src`` with each import replaced by a ``const`` destructuring of the imported file's scope object,
    after checking that the file exports every imported name."""
    for dep, pairs in module_imports(script):
        exported = module_exports(dep)
        missing = [name for name, _ in pairs if name not in exported or name == "default"]
        if missing:
            raise ValueError(f"js/{script} imports {missing} from ./{dep}, which exports {exported}")

    def replace(match):
        dep = match.group(2)[2:]
        pairs = dict(module_imports(script))[dep]
        inner = ", ".join(a if a == b else f"{a}: {b}" for a, b in pairs)
        return f'const {{ {inner} }} = {_scope_name(dep)}; // import {{ ... }} from "./{dep}"'

    return _IMPORT.sub(replace, src)


def _scope_name(script: str) -> str:
    return "__module_" + re.sub(r"\W", "_", script)


def bundle(script: str) -> str:
    """The one ES module anywidget receives for ``js/<script>``: its imports linked in (see the module docs).

    Each imported file runs once, in its own function scope, before the files that import it; the bundle
    exports what ``js/<script>`` exports, and nothing else.
    """
    parts = []
    for dep in _link_order(script):
        if "default" in module_exports(dep):
            raise ValueError(f"js/{dep} is imported by another file and must not have a default export")
        body = _EXPORT_DECL.sub("", _linked_imports(dep, (JS_DIR / dep).read_text()))
        names = [n for n in module_exports(dep)]
        parts.append(
            f"// ---- ./{dep}, linked in by transformer_lib/viz/live.py (bundle): its own scope\n"
            f"const {_scope_name(dep)} = (() => {{\n{body.rstrip()}\n"
            f"return Object.freeze({{ {', '.join(names)} }});\n}})();\n"
        )
    parts.append(f"// ---- ./{script}\n" + _linked_imports(script, (JS_DIR / script).read_text()))
    return "\n".join(parts)

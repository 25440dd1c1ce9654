"""Sphinx extension loaded by _config.yml (``sphinx.local_extensions``): fixes for the book build.

1. Bound a rare stall while notebooks execute.
   Symptom (seen in about 5 builds of 90 on our machines):
   in a few builds out of a hundred, after a notebook's last cell the build
   waited exactly ``execute.timeout`` seconds, then went on as if nothing had happened.
   Where the wait is: myst-nb runs notebooks with nbclient, which waits for each kernel reply with
   ``await socket.poll(timeout)`` on a pyzmq *asyncio* socket (jupyter_client's
   ``AsyncZMQSocketChannel.get_msg``). Only when that poll's timer fires does pyzmq poll once more
   without waiting, and that final poll finds the reply: so a wake-up that was lost leaves the build
   waiting for the whole timeout, then it succeeds. The same symptom is reported upstream for
   notebooks with widgets (nbclient issue 312: "execute cell will sometimes block", where the
   maintainers point at ``shell_channel.get_msg`` returning only at its timeout) and for asyncio
   ZeroMQ polls in general (pyzmq issue 1558: the event is returned after the timeout; ZeroMQ
   signals readiness through an edge-triggered descriptor). We did not reproduce it here: 0 stalls
   in 169 executions of the quick start and of a small notebook with widgets (timeout 20 s, two
   busy cores), so this is the one code path that explains "exactly the timeout, then success",
   not an observed trace. While waiting for output (``timeout=None``) the same loss would last
   until nbclient's 4 s ``iopub_timeout`` and drop the cell's output.
   Fix: wait in slices of at most ``SLICE_S`` seconds. Each slice ends with that non-waiting poll,
   so a lost wake-up costs at most one slice; the total wait and the ``Empty`` at the deadline are
   unchanged. nbval (``make test``) uses jupyter_client's blocking client and is not affected.

2. Drop duplicate <script> tags. Scripts added by extensions during the build (sphinx-thebe's
   configuration, sphinx-togglebutton's selector) are emitted twice by Sphinx 7.4; the second copy
   of sphinx-thebe's ``const THEBE_JS_URL`` throws a SyntaxError on every page.

3. ``html_baseurl`` from the repository address. _config.yml holds the address once
   (``repository.url``); the site's address on GitHub Pages, ``https://<owner>.github.io/<repo>/``,
   is derived from it here with the same function that writes the README's "read online" link
   (``pages_url`` in tools/sync_setup_cells.py). Sphinx uses it for each page's canonical link.
   An explicit ``html.baseurl`` in _config.yml wins.

4. A 404 page. GitHub Pages answers a missing address with the site's ``404.html``, at whatever
   depth the reader was, so relative links cannot work there: the page is a small self-contained
   HTML file whose links are absolute, under ``html_baseurl``. Written when the HTML build finishes.

5. A failed check shows on its page (transformer_lib/book_tools/claims.py, ``BOOK_CLAIMS=strict|report``).
   128 of the book's 129 checks sit in cells tagged ``remove-cell``, which myst-nb drops, outputs and all,
   before the notebook even runs. So every ``remove-cell`` code cell is kept as an empty slot
   (``notebook_to_tokens`` sees the tag ``SLOT_TAG`` instead, for that call only; the notebook that runs,
   is cached and written out keeps its tags), and the slot renders nothing unless the cell left a failure:
   a failed claim's record (report mode: a display output of MIME type ``FAILED_CLAIM_MIME``) becomes the
   box that quotes the sentence and its values; an error (strict mode's ``AssertionError``, or any other
   exception) becomes a box saying which hidden cell failed. A visible cell that failed keeps myst-nb's
   traceback and gets an anchor. Then each notebook page gets, under its title, a banner for every
   failed claim (linking to its box) and one for a failed cell ("everything after it is missing", linking
   to it), and the build's last lines list every failed claim (chapter, sentence) and failed notebook;
   in strict mode those lines are warnings (fatal under ``-W``), in report mode information. Any
   exception other than a report-mode claim still fails ``make book`` in both modes: myst-nb's "Executing
   notebook failed" is a warning.

6. Provenance: under its title, every notebook page says what produced its numbers: when the notebook was
   executed (myst-nb's execution record; for a cached notebook, when it was cached), the commit built, the
   torch build, the CPU capability torch reports (``torch.backends.cpu.get_cpu_capability()``), torch's
   thread count and the device, taken in the build process, whose environment the kernels inherit.

7. Execution cache without stale numbers. With ``execute_notebooks: cache`` a reader's second
   ``make book`` re-executes nothing; but jupyter-cache matches notebooks by their code cells only. So
   a hash of ``book_cache_inputs`` (the library with its checkpoints, the requirements files,
   pyproject.toml) and of what the provenance line states (torch build, CPU capability, threads, device,
   and the variables that change them) is kept beside the cache: when it differs, the cache is emptied
   and every notebook page is re-read, hence re-executed. In strict mode (``BOOK_CLAIMS=strict``, the
   default under ``CI=true``) and under CI every notebook is executed, whatever the cache holds.

8. The set-up cell installs what the page was built from. The committed set-up cell installs
   ``git+<repository>@<branch>`` (a file cannot name the commit it is part of). In the built page and in
   the page's downloadable ``.ipynb`` (``_sources/``) that source is pinned to the commit built
   (``git rev-parse HEAD``, or ``GITHUB_SHA``), and the Colab launch button opens the notebook at that
   commit (``repository_branch``). What runs is not changed: the executed notebook, hence the cache,
   keep the committed cell. On Colab, the notebook at that commit still installs ``<branch>``: README.md
   says so.
"""

from __future__ import annotations

import datetime
import hashlib
import html
import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from queue import Empty

from docutils import nodes
from jupyter_client.channels import AsyncZMQSocketChannel
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)

SLICE_S = 0.5


async def get_msg(self, timeout: float | None = None) -> dict:
    """``AsyncZMQSocketChannel.get_msg`` that polls in slices of at most ``SLICE_S`` (same contract)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        wait = SLICE_S if remaining is None else min(SLICE_S, remaining)
        if await self.socket.poll(int(wait * 1000)):
            return await self._recv()
        if remaining is not None and remaining <= wait:
            raise Empty


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """Keep the first of identical script entries (same file, same attributes and inline body)."""
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, kept = set(), []
    for js in scripts:
        key = (
            str(getattr(js, "filename", js) or ""),  # None and "" both mean an inline script
            tuple(sorted(getattr(js, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def _sync_tool():
    """tools/sync_setup_cells.py (loaded by path: tools/ is not a package)."""
    path = Path(__file__).with_name("sync_setup_cells.py")
    spec = importlib.util.spec_from_file_location("sync_setup_cells", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages_url(repository_url: str) -> str:
    """``pages_url`` of tools/sync_setup_cells.py."""
    return _sync_tool().pages_url(repository_url)


def set_baseurl(app, config) -> None:
    """``html_baseurl`` = the GitHub Pages address of ``repository.url``, unless set explicitly."""
    url = (config.html_theme_options or {}).get("repository_url")
    if not config.html_baseurl and url:
        config.html_baseurl = _pages_url(url)


PAGE_404 = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Page not found - {title}</title>
{icon}<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       max-width: 36rem; margin: 12vh auto; padding: 0 1.5rem; line-height: 1.5; }}
h1 {{ font-size: 1.6rem; }} a {{ color: #1f5fa8; }}
</style>
</head>
<body>
<h1>Page not found</h1>
<p>There is no page at this address in <em>{title}</em>. It may have moved when the book was reorganised.</p>
<p><a href="{base}index.html">Go to the start of the book</a> or <a href="{base}search.html">search it</a>.</p>
</body>
</html>
"""


def write_404(app, exception) -> None:
    """Write ``404.html`` (absolute links under ``html_baseurl``) into the HTML output folder."""
    if exception is not None or app.builder.format != "html":
        return
    base = app.config.html_baseurl or "/"
    base = base if base.endswith("/") else base + "/"
    title = html.escape(app.config.html_title or app.config.project)
    favicon = app.config.html_favicon
    icon = (
        ""
        if not favicon or "://" in favicon
        else f'<link rel="icon" href="{html.escape(base)}_static/{html.escape(Path(favicon).name)}">\n'
    )
    page = PAGE_404.format(title=title, base=html.escape(base), icon=icon)
    Path(app.outdir, "404.html").write_text(page, encoding="utf-8")


# ------------------------------------------------------- 5-8: what a page says about its own numbers

SLOT_TAG = "book-failure-slot"  # stands in for remove-cell while myst-nb makes tokens (never in a committed file)
REMOVE_TAGS = ("remove-cell", "remove_cell")
CELL_ANCHOR = "failed-cell"
CELL_MARK_CLASS = "book-failed-cell"
BANNER_CLASS = "book-failure-banner"
PROVENANCE_CLASS = "book-provenance"
DEFAULT_CACHE_INPUTS = ["transformer_lib/**/*", "requirements*.txt", "pyproject.toml"]
STAMP = "book-inputs.sha256"  # beside jupyter-cache's database
# variables that change what torch computes or how fast (they are part of the cache's key)
ENV_FACTS = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)
BOX_STYLE = (
    "border:2px solid #b3261e;border-left-width:8px;background:#fdecea;color:#3b0a07;"
    "padding:0.6em 1em;margin:0.8em 0;border-radius:4px"
)

_BUILD: dict = {}  # set when the build starts: the commit, the torch facts, the branch, the inputs' hash


def _claims():
    from transformer_lib.book_tools import claims

    return claims


def claims_mode() -> str:
    return _claims().mode()


def _forced() -> bool:
    """Strict mode, or CI: execute every notebook whatever the cache holds."""
    return claims_mode() == "strict" or os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def git_commit(root: Path) -> tuple[str | None, bool]:
    """(HEAD's commit, whether tracked files differ from it); GITHUB_SHA, or None, where git cannot tell."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if head.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", head.stdout.strip()):
            status = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            return head.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    sha = os.environ.get("GITHUB_SHA", "").strip()
    return (sha, False) if re.fullmatch(r"[0-9a-f]{40}", sha) else (None, False)


def torch_facts() -> dict:
    """What the kernels (which inherit this process's environment) compute with."""
    import torch

    device = "cpu"
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)})"
    return {
        "torch": torch.__version__,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "device": device,
    }


def cache_input_files(root: Path, patterns: list[str]) -> list[Path]:
    """The files matching ``patterns`` (globs relative to ``root``), without Python's byte-code caches."""
    return sorted(
        {
            p
            for pattern in patterns
            for p in root.glob(pattern)
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        }
    )


def inputs_hash(root: Path, patterns: list[str], facts: dict) -> str:
    """SHA-256 of the files matching ``patterns`` under ``root`` (names and bytes) and of ``facts`` and the
    variables in ``ENV_FACTS``."""
    digest = hashlib.sha256()
    for path in cache_input_files(root, patterns):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    env = {name: os.environ.get(name) for name in ENV_FACTS}
    digest.update(json.dumps({"facts": facts, "env": env}, sort_keys=True).encode())
    return digest.hexdigest()


def pin_launch_buttons(app, config) -> None:
    """Remember the configured branch; point the launch (Colab) button at the commit being built."""
    options = dict(config.html_theme_options or {})
    commit, dirty = git_commit(Path(app.confdir))
    _BUILD.update(
        commit=commit, dirty=dirty, url=options.get("repository_url"), branch=options.get("repository_branch")
    )
    if commit and options.get("repository_branch"):
        options["repository_branch"] = commit
        config.html_theme_options = options


def prepare_execution(app) -> None:
    """After myst-nb has read its configuration: force execution where required, empty a stale cache."""
    config = getattr(app.env, "mystnb_config", None)
    root = Path(app.confdir)
    _BUILD.update(torch_facts())
    _BUILD["mode"] = claims_mode()
    _BUILD["inputs"] = inputs_hash(
        root, list(app.config.book_cache_inputs), {k: _BUILD[k] for k in ("torch", "capability", "threads", "device")}
    )
    if config is None:
        return
    if _forced() and config.execution_mode == "cache" and getattr(app.config, "book_execute_into_cache", False):
        # tools/book_i18n.py: the translated editions read this edition's executions from the cache
        LOGGER.info(f"BOOK_CLAIMS={_BUILD['mode']}: executing every notebook into an emptied execution cache")
        shutil.rmtree(config.execution_cache_path, ignore_errors=True)
    elif _forced() and config.execution_mode != "force":
        LOGGER.info(f"BOOK_CLAIMS={_BUILD['mode']}: executing every notebook (execution mode 'force')")
        app.env.mystnb_config = config = config.copy(execution_mode="force")
    if config.execution_mode == "cache":
        cache = Path(config.execution_cache_path)
        stamp = cache / STAMP
        old = stamp.read_text().strip() if stamp.is_file() else None
        if cache.exists() and old != _BUILD["inputs"]:
            LOGGER.info(
                "the library, its checkpoints, the requirements or torch's set-up changed: "
                f"emptying the execution cache {cache}"
            )
            shutil.rmtree(cache)
        cache.mkdir(parents=True, exist_ok=True)
        stamp.write_text(_BUILD["inputs"] + "\n")


def _is_notebook(env, docname: str) -> bool:
    try:
        return str(env.doc2path(docname)).endswith(".ipynb")
    except Exception:  # noqa: BLE001 - a document Sphinx no longer knows
        return False


def outdated_notebooks(app, env, added, changed, removed) -> list[str]:
    """Every notebook page is re-read (so executed, or taken from the refreshed cache) when forced, or when the
    inputs' hash differs from the one the saved environment was built with."""
    inputs = _BUILD.get("inputs")
    if not _forced() and getattr(env, "book_inputs", None) == inputs:
        return []
    env.book_inputs = inputs
    return sorted(d for d in env.found_docs if _is_notebook(env, d) and d not in added and d not in changed)


def pinned_setup_source(source: str) -> str:
    """The set-up cell's ``source`` installing the commit being built instead of the configured branch."""
    url, branch, commit = _BUILD.get("url"), _BUILD.get("branch"), _BUILD.get("commit")
    if not (url and branch and commit):
        return source
    sync = _sync_tool()
    config = {"repository": {"url": url, "branch": branch}}
    return source.replace(
        f'"{sync.pip_source(config)}"', f'"{sync.pip_source({"repository": {"url": url, "branch": commit}})}"'
    )


def _tokens_with_slots(original):
    def notebook_to_tokens(notebook, *args, **kwargs):
        kept = []
        for cell in notebook.cells:
            tags = cell.get("metadata", {}).get("tags", [])
            if cell.get("cell_type") == "code" and any(t in REMOVE_TAGS for t in tags):
                kept.append((cell, tags))
                cell.metadata["tags"] = [t for t in tags if t not in REMOVE_TAGS] + [SLOT_TAG]
        try:
            tokens = original(notebook, *args, **kwargs)
        finally:
            for cell, tags in kept:
                cell.metadata["tags"] = tags
        for token in tokens:  # only the page's copy of the set-up cell; the notebook that runs keeps its own
            if token.type == "nb_cell_code" and "setup" in (token.meta or {}).get("metadata", {}).get("tags", []):
                token.content = pinned_setup_source(token.content)
        return tokens

    notebook_to_tokens.book_fixes = True
    return notebook_to_tokens


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def _cell_mark(index: int, error: str) -> str:
    return (
        f'<span id="{CELL_ANCHOR}" class="{CELL_MARK_CLASS}" data-cell="{index}" '
        f'data-error="{html.escape(error, quote=True)}"></span>'
    )


def _error_line(output) -> str:
    return f"{output.get('ename', 'Error')}: {_strip_ansi(_text(output.get('evalue', '')))}"


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def failure_html(outputs, index: int, hidden: bool) -> list[str]:
    """HTML for the failures a cell left: its failed-claim records (report mode) and, for a hidden cell, its
    errors; an anchor for any error."""
    claims = _claims()
    parts = []
    for out in outputs:
        kind = out.get("output_type")
        data = out.get("data", {}) if kind in ("display_data", "execute_result") else {}
        if hidden and claims.FAILED_CLAIM_MIME in data:
            record = data[claims.FAILED_CLAIM_MIME]
            record = json.loads(_text(record)) if not isinstance(record, dict) else record
            parts.append(claims.failure_html(record.get("sentence", "?"), record.get("values") or {}))
        elif kind == "error":
            parts.append(_cell_mark(index, _error_line(out)))
            if not hidden:
                continue
            value = _strip_ansi(_text(out.get("evalue", "")))
            if out.get("ename") == "AssertionError" and value.startswith(claims.PREFIX):
                parts.append(claims.failure_html(value[len(claims.PREFIX) :], {}, ran_on=False))
            else:
                parts.append(
                    f'<div class="book-hidden-cell-failed" role="note" style="{BOX_STYLE}"><p '
                    'style="margin:0"><strong>A hidden cell of this page failed here</strong> '
                    f"(<code>{html.escape(_error_line(out))}</code>); the build log has its traceback."
                    "</p></div>"
                )
    return parts


def _renders_failures(original):
    def render_nb_cell_code(self, token):
        index = token.meta["index"]
        tags = token.meta["metadata"].get("tags", [])
        hidden = SLOT_TAG in tags
        _, outputs = self.nb_client.code_cell_outputs(index)
        if "raises-exception" in tags:  # an error this cell is meant to show
            outputs = [out for out in outputs if out.get("output_type") != "error"]
        for part in failure_html(outputs, index, hidden):
            node = nodes.raw("", part, format="html")
            self.add_line_and_source_path(node, token)
            self.current_node.append(node)
        if not hidden:
            original(self, token)

    render_nb_cell_code.book_fixes = True
    return render_nb_cell_code


def _patch_myst_nb() -> None:
    import myst_nb.sphinx_ as nb_sphinx
    from myst_nb.core.render import MditRenderMixin

    if not getattr(nb_sphinx.notebook_to_tokens, "book_fixes", False):
        nb_sphinx.notebook_to_tokens = _tokens_with_slots(nb_sphinx.notebook_to_tokens)
    if not getattr(MditRenderMixin.render_nb_cell_code, "book_fixes", False):
        MditRenderMixin.render_nb_cell_code = _renders_failures(MditRenderMixin.render_nb_cell_code)


# the provenance line in each edition's language (tools/book_i18n.py builds the editions; English by default)
PROVENANCE_TEXT = {
    "en": {
        "line": "Numbers on this page: {when}, from {source}, with {facts}. Another machine, thread count or "
        "version computes somewhat different numbers.",
        "computed": "computed {stamp} UTC",
        "not_executed": "not executed in this build",
        "commit": "commit {ref}",
        "dirty": " with uncommitted changes",
        "outside_git": "a source tree outside git",
        "facts": "torch {torch}, CPU capability {capability}, {threads} threads, device {device}",
    },
    "zh": {
        "line": "本页的数字：{when}，来自{source}，使用 {facts}。换一台机器、线程数或版本，算出的数字会略有不同。",
        "computed": "计算于 {stamp} UTC",
        "not_executed": "本次构建中没有执行",
        "commit": "提交 {ref}",
        "dirty": "（含未提交的改动）",
        "outside_git": " git 之外的源代码树",
        "facts": "torch {torch}、CPU 能力 {capability}、{threads} 个线程、设备 {device}",
    },
}


def provenance_html(exec_data: dict | None, language: str | None = None) -> str:
    text = PROVENANCE_TEXT.get((language or "en").split("_")[0], PROVENANCE_TEXT["en"])
    commit, url = _BUILD.get("commit"), _BUILD.get("url")
    when = text["not_executed"]
    if exec_data and exec_data.get("mtime"):
        stamp = datetime.datetime.fromtimestamp(exec_data["mtime"], tz=datetime.timezone.utc)
        when = text["computed"].format(stamp=f"{stamp:%Y-%m-%d %H:%M}")
    if commit:
        short = html.escape(commit[:12])
        ref = (
            f'<a href="{html.escape(url.rstrip("/"))}/commit/{html.escape(commit)}"><code>{short}</code></a>'
            if url
            else f"<code>{short}</code>"
        )
        source = text["commit"].format(ref=ref) + (text["dirty"] if _BUILD.get("dirty") else "")
    else:
        source = text["outside_git"]
    facts = text["facts"].format(
        torch=html.escape(str(_BUILD.get("torch"))),
        capability=html.escape(str(_BUILD.get("capability"))),
        threads=_BUILD.get("threads"),
        device=html.escape(str(_BUILD.get("device"))),
    )
    return (
        f'<p class="{PROVENANCE_CLASS}" style="font-size:85%;color:#555;margin:0.2em 0 1em 0">'
        + text["line"].format(when=when, source=source, facts=facts)
        + "</p>"
    )


def _banner(claims: list[tuple[str, str]], cell: dict | None) -> str:
    parts = []
    if claims:
        items = "".join(
            f'<li><a href="#{anchor}">&ldquo;{html.escape(sentence)}&rdquo;</a></li>' for anchor, sentence in claims
        )
        parts.append(
            '<p style="margin:0"><strong>A measurement on this machine does not support '
            + ("one of this page's sentences" if len(claims) == 1 else f"{len(claims)} of this page's sentences")
            + f':</strong></p><ul style="margin:0.3em 0">{items}</ul>'
        )
    if cell:
        where = f'<a href="#{CELL_ANCHOR}">a cell</a>' if cell.get("anchor") else "a cell"
        parts.append(
            f'<p style="margin:0"><strong>This page is incomplete:</strong> its notebook stopped at '
            f"{where} that failed when the book was built (<code>{html.escape(cell['error'])}</code>); "
            "the outputs, figures and numbers after that cell are missing.</p>"
        )
    return f'<div class="{BANNER_CLASS}" role="alert" style="{BOX_STYLE}">{"".join(parts)}</div>'


def annotate_page(app, doctree) -> None:
    """Number the failure boxes of a notebook page, put the banner and the provenance line under its title, and
    note the failures for the end of the build."""
    env = app.env
    docname = env.docname
    if not _is_notebook(env, docname):
        return
    box_class = _claims().BOX_CLASS
    claims, cell = [], None
    for raw in list(doctree.findall(nodes.raw)):
        text = raw.astext()
        if box_class not in text and CELL_MARK_CLASS not in text:
            continue

        def number(match):
            anchor = f"failed-claim-{len(claims) + 1}"
            claims.append((anchor, html.unescape(match.group(1))))
            return f'id="{anchor}" {match.group(0)}'

        new = re.sub(rf'class="{box_class}" data-sentence="([^"]*)"', number, text)
        mark = re.search(rf'class="{CELL_MARK_CLASS}" data-cell="\d+" data-error="([^"]*)"', text)
        if mark and cell is None:
            cell = {"anchor": True, "error": html.unescape(mark.group(1))}
        if new != text:
            raw.replace(raw[0], nodes.Text(new))
    from myst_nb.sphinx_ import NbMetadataCollector

    exec_data = NbMetadataCollector.get_exec_data(env, docname)
    if exec_data and not exec_data.get("succeeded", True) and cell is None:
        lines = [line for line in _strip_ansi(exec_data.get("traceback") or "").splitlines() if line.strip()]
        cell = {"anchor": False, "error": lines[-1].strip() if lines else str(exec_data.get("error"))}
    if cell is not None and exec_data and exec_data.get("succeeded", False):
        cell = None  # an error the notebook expected (a cell tagged raises-exception)
    if cell is not None and exec_data and exec_data.get("error") == "CellTimeoutError":
        # nbclient interrupts the kernel at the limit: the cell's own error is a bare KeyboardInterrupt
        limit = getattr(getattr(env, "mystnb_config", None), "execution_timeout", None)
        cell["error"] = "CellTimeoutError: the cell ran past the build's per-cell limit" + (
            f" of {limit} s" if limit else ""
        )
    added = [nodes.raw("", provenance_html(exec_data, app.config.language), format="html")]
    if claims or cell:
        added.insert(0, nodes.raw("", _banner(claims, cell), format="html"))
    section = next(iter(doctree.findall(nodes.section)), None)
    parent, at = (
        (section, 1) if section is not None and len(section) and isinstance(section[0], nodes.title) else (doctree, 0)
    )
    for node in reversed(added):
        parent.insert(at, node)
    failures = getattr(env, "book_failures", None)
    if failures is None:
        env.book_failures = failures = {}
    failures[docname] = {"claims": [sentence for _, sentence in claims], "cell": cell and cell["error"]}


def purge_failures(app, env, docname) -> None:
    getattr(env, "book_failures", {}).pop(docname, None)


def merge_failures(app, env, docnames, other) -> None:
    if not hasattr(env, "book_failures"):
        env.book_failures = {}
    env.book_failures.update({d: v for d, v in getattr(other, "book_failures", {}).items() if d in docnames})


_WRITTEN: set[str] = set()


def note_written(app, pagename, templatename, context, doctree) -> None:
    if doctree is not None and _is_notebook(app.env, pagename):
        _WRITTEN.add(pagename)


def pin_downloads(app, exception) -> None:
    """The downloadable copy of each notebook written in this build (``_sources/``) installs the built commit."""
    if exception is not None or app.builder.format != "html":
        return
    import nbformat

    for docname in sorted(_WRITTEN):
        path = Path(app.outdir, "_sources", docname + ".ipynb")
        if not path.is_file():
            continue
        nb = nbformat.read(path, as_version=4)
        changed = False
        for cell in nb.cells:
            if cell.cell_type == "code" and "setup" in cell.metadata.get("tags", []):
                pinned = pinned_setup_source(cell.source)
                changed, cell.source = changed or pinned != cell.source, pinned
        if changed:
            nbformat.write(nb, path)


def list_failures(app, exception) -> None:
    """The build's last lines: every failed claim (chapter, sentence) and every notebook that failed."""
    if exception is not None:
        return
    failures = getattr(app.env, "book_failures", {})
    lines = []
    for docname in sorted(failures):
        for sentence in failures[docname]["claims"]:
            lines.append(f"{docname}: a measurement does not support: {sentence}")
        if failures[docname]["cell"]:
            lines.append(f"{docname}: the notebook stopped at a failed cell: {failures[docname]['cell']}")
    if not lines:
        return
    strict = _BUILD.get("mode", claims_mode()) == "strict"
    LOGGER.info("")
    LOGGER.info(f"failed checks ({len(lines)}), mode BOOK_CLAIMS={'strict' if strict else 'report'}:")
    for line in lines:
        if strict:
            LOGGER.warning(line, type="book", subtype="failed_check")
        else:
            LOGGER.info("  " + line)


def setup(app):
    AsyncZMQSocketChannel.get_msg = get_msg
    _patch_myst_nb()
    app.add_config_value("book_cache_inputs", DEFAULT_CACHE_INPUTS, "env")
    app.add_config_value("book_execute_into_cache", False, "")  # forced execution writes the cache (book_i18n.py)
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("html-page-context", note_written)
    app.connect("config-inited", set_baseurl)
    app.connect("config-inited", pin_launch_buttons)
    app.connect("builder-inited", prepare_execution, priority=900)  # after myst-nb has read its configuration
    app.connect("env-get-outdated", outdated_notebooks)
    app.connect("doctree-read", annotate_page)
    app.connect("env-purge-doc", purge_failures)
    app.connect("env-merge-info", merge_failures)
    app.connect("build-finished", write_404)
    app.connect("build-finished", pin_downloads)
    app.connect("build-finished", list_failures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

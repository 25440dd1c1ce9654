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
import time
from pathlib import Path
from queue import Empty

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())

CHAPTERS = ["notebooks/00_quickstart", "notebooks/01_rnn_limits", "notebooks/02_attention",
            "notebooks/03_multi_head_attention", "notebooks/04_positional_encoding",
            "notebooks/05_encoder_decoder", "notebooks/06_masking", "notebooks/07_kv_cache",
            "notebooks/08_pruning", "notebooks/09_quantization"]
FRONT_MATTER = ["book/intro", "book/notation", "book/references"]
REQUIRED_REFERENCES = {  # key: (first author's surname, year)
    "vaswani2017attention": ("Vaswani", 2017), "devlin2019bert": ("Devlin", 2019),
    "radford2019language": ("Radford", 2019), "su2021roformer": ("Su", 2021),
    "press2022train": ("Press", 2022), "ba2016layer": ("Ba", 2016), "xiong2020layer": ("Xiong", 2020),
    "michel2019sixteen": ("Michel", 2019), "dettmers2022llmint8": ("Dettmers", 2022),
    "wang2020minilm": ("Wang", 2020), "reimers2019sentence": ("Reimers", 2019),
    "hochreiter1997lstm": ("Hochreiter", 1997), "bengio1994learning": ("Bengio", 1994),
    "pascanu2013difficulty": ("Pascanu", 2013), "shazeer2019fast": ("Shazeer", 2019),
    "ainslie2023gqa": ("Ainslie", 2023), "frantar2022gptq": ("Frantar", 2022),
    "jacob2018quantization": ("Jacob", 2018), "han2015learning": ("Han", 2015),
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
    assert nb.cells and nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), \
        "a chapter opens with its title"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "# NBVAL_CHECK_OUTPUT" not in cell.source:
            assert cell.outputs == [] and cell.execution_count is None, f"cell {i} has outputs"


KNOWN_TAGS = {"setup", "hide-input", "hide-output", "hide-cell", "remove-input", "remove-output", "remove-cell",
              "nbval-ignore-output", "nbval-skip", "raises-exception"}


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


def test_make_book_treats_warnings_as_errors():
    makefile = (ROOT / "Makefile").read_text()
    book = re.search(r"^book:.*?(?=^\S)", makefile, re.S | re.M).group(0)
    assert "jupyter-book build . " in book and "-W -n --keep-going" in book
    assert "vendor" in book.splitlines()[0], "make book installs the served JavaScript first"


def test_site_serves_its_own_javascript():
    sphinx = CONFIG["sphinx"]
    assert "sphinx-mathjax-offline" in sphinx["extra_extensions"]
    static = sphinx["config"]["html_static_path"]
    assert "_static" not in static and not (ROOT / "_static").exists(), \
        "Jupyter Book adds every .js of a source _static/ folder to every page"
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
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "vendor_static", "_static"],
                             capture_output=True, text=True)
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
        if not path.is_file() or path.suffix in {".png", ".safetensors", ".whl", ".pyc"} \
                or path.stat().st_size > 2_000_000:
            continue
        text = path.read_text(errors="ignore")
        if url not in text:
            continue
        if path.suffix == ".ipynb":  # only inside the generated set-up cell
            nb = nbformat.reads(text, as_version=4)
            if all(url not in c.source or "setup" in c.metadata.get("tags", []) for c in nb.cells):
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
    """Real ZeroMQ asyncio sockets: a queued message is returned, a missing one raises Empty on time."""
    import zmq
    import zmq.asyncio
    from jupyter_client.channels import AsyncZMQSocketChannel
    from jupyter_client.session import Session

    get_msg = _book_fixes().get_msg

    async def scenario():
        ctx = zmq.asyncio.Context()
        a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
        a.bind("inproc://book-fixes")
        b.connect("inproc://book-fixes")
        session = Session()
        channel = AsyncZMQSocketChannel(b, session)
        try:
            t0 = time.monotonic()
            with pytest.raises(Empty):
                await get_msg(channel, timeout=1.2)
            waited = time.monotonic() - t0
            loop = asyncio.get_running_loop()
            loop.call_later(0.8, lambda: session.send(a, "execute_reply", {"status": "ok"}))
            t0 = time.monotonic()
            msg = await get_msg(channel, timeout=None)  # waits across slices until the message comes
            late = time.monotonic() - t0
            return waited, msg["msg_type"], late
        finally:
            a.close(0)
            b.close(0)
            ctx.term()

    waited, msg_type, late = asyncio.run(scenario())
    assert 1.15 <= waited < 1.2 + 0.5
    assert msg_type == "execute_reply" and 0.75 <= late < 1.5


def test_a_lost_wake_up_costs_at_most_one_slice():
    """A socket whose poll is never woken early (the stall's cause): the reply is still seen in ~SLICE_S."""
    from jupyter_client.channels import AsyncZMQSocketChannel

    fixes = _book_fixes()

    class DeafSocket:
        """poll(t) sleeps the full t and only then looks: every wake-up during the wait is lost."""
        def __init__(self, arrives_at):
            self.arrives_at = arrives_at

        async def poll(self, timeout_ms=None):
            await asyncio.sleep((timeout_ms or 0) / 1000)
            return 1 if time.monotonic() >= self.arrives_at else 0

    class Channel(AsyncZMQSocketChannel):
        def __init__(self, socket):
            self.socket = socket

        async def _recv(self, **kwargs):
            return {"msg_type": "execute_reply"}

    async def wait(get_msg, timeout):
        channel = Channel(DeafSocket(time.monotonic() + 0.2))
        t0 = time.monotonic()
        msg = await get_msg(channel, timeout=timeout)
        return msg["msg_type"], time.monotonic() - t0

    msg_type, took = asyncio.run(wait(fixes.get_msg, timeout=240))
    assert msg_type == "execute_reply" and took < 0.2 + fixes.SLICE_S + 0.3
    # the unpatched method on the same socket waits the whole timeout (3 s here, 240 s in the build)
    assert AsyncZMQSocketChannel.get_msg is not fixes.get_msg, "jupyter_client is already patched here"
    msg_type, took = asyncio.run(wait(AsyncZMQSocketChannel.get_msg, timeout=3))
    assert msg_type == "execute_reply" and took >= 3

